"""A sweep's spec is stored once; each trial keeps its difference (the faults issue, hostile input)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from nomad_gpu.render import SweepSpec, parse_spec
from nomad_gpu.render.sweep import expand_sweep
from nomad_gpu.store import EntryState, QueueEntry, SqliteStore, specdiff

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                         max_size=4),
                           max_leaves=12)


@given(json_values, json_values)
def test_a_difference_applied_gives_the_other_exactly(base: Any, other: Any) -> None:
    assert specdiff.apply(base, specdiff.diff(base, other)) == other


def trials(n: int, padding: int) -> list[QueueEntry]:
    spec = parse_spec({"kind": "sweep", "name": "hpo", "task": {"image": "i", "args": ["--lr", "{{ lr }}"],
                                                                 "env": {"PAD": "x" * padding}},
                       "gpu": {"count": 1}, "sweep": {"parameters": {"lr": [i / 1000 for i in range(n)]}}})
    assert isinstance(spec, SweepSpec)
    return [QueueEntry(id="", name=t.name, team=t.team, priority=t.priority, spec=t.model_dump(mode="json"),
                       submitted_at=1.0, sweep="hpo-1") for t in expand_sweep(spec)]


def test_a_sweep_is_stored_once_and_read_back_whole(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    store = SqliteStore(str(path))
    wanted = trials(1000, padding=50_000)
    stored = store.add(wanted)
    assert [e.spec for e in store.list()] == [e.spec for e in wanted]
    assert store.get(stored[500].id).spec == wanted[500].spec
    size = path.stat().st_size + Path(f"{path}-wal").stat().st_size
    assert size < 5 * 2**20, f"{size >> 20} MiB for 1,000 trials of a 50 KB spec (a copy each was ~50 MB)"
    store.close()
    again = SqliteStore(str(path))
    assert again.get(stored[999].id).spec == wanted[999].spec


def test_collected_sweeps_leave_no_shared_spec_behind() -> None:
    store = SqliteStore()
    stored = store.add(trials(3, padding=10))
    for e in stored:
        store.transition(e.id, EntryState.CANCELLED, finished_at=1.0)
    store.add([QueueEntry(id="", name="later", team="t", priority=50, spec={}, submitted_at=2.0)])
    assert store.purge_finished(before=10.0) == 3
    assert store._db.execute("SELECT COUNT(*) FROM spec_bases").fetchone()[0] == 0
