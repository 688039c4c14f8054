"""A two-team past (GPU, MIG and share jobs, a retry, a failure, one still running, cancelled jobs and a
cancelled sweep) written through the store contract, and the usage report compared with its pure
definition (`service/accounting.usage_rows`): shared by the contract suite and the SQLite-only tests."""

from __future__ import annotations

from typing import Any

from nomad_gpu.service.accounting.report import GROUPINGS, Window, usage_rows
from nomad_gpu.store import EntryState, QueueEntry, Store

GPU = {"node": "n1", "instance_ids": ["GPU-1"], "gpu_equivalents": 1.0, "device_name": "nvidia/gpu/NVIDIA A100"}
MIG = {"node": "n2", "instance_ids": ["MIG-1"], "gpu_equivalents": 3 / 7, "device_name": "NVIDIA H100 MIG 3g.40gb"}
SHARE = {"node": "n3", "instance_ids": ["GPU-9/s0"], "gpu_equivalents": 0.25, "share_milli": 250,
         "device_name": "nvidia/gpu/NVIDIA L4"}


def spec(team: str, kind: str = "gpu", job_class: str | None = None) -> dict[str, Any]:
    asks: dict[str, dict[str, Any]] = {"gpu": {"gpu": {"count": 1, "models": ["A100"]}},
                                       "mig": {"mig": {"profile": "3g.40gb"}}, "share": {"share": {"milli": 250}},
                                       "cpu": {}}
    ask = asks[kind]
    out: dict[str, Any] = {"name": "j", "team": team, "groups": [{"name": "g", "count": 1, **ask}]}
    if job_class:
        out["class"] = job_class
    return out


def job(team: str, at: float, **spec_args: Any) -> QueueEntry:
    return QueueEntry(id="", name="j", team=team, priority=50, spec=spec(team, **spec_args), submitted_at=at)


def run(store: Store, e: QueueEntry, placement: dict[str, Any], start: float, end: float | None,
        final: EntryState = EntryState.COMPLETE, retry_at: float | None = None) -> None:
    """Admit ``e`` at ``start``; optionally fail it back to the queue at ``retry_at`` and admit it again;
    end it ``final`` at ``end`` (None: it still runs)."""
    store.transition(e.id, EntryState.ADMITTED, at=start, admitted_at=start, placements=(placement,))
    store.transition(e.id, EntryState.RUNNING, at=start + 5)
    if retry_at is not None:
        store.transition(e.id, EntryState.QUEUED, at=retry_at, placements=())
        store.transition(e.id, EntryState.ADMITTED, at=retry_at + 30, placements=(placement,))
    if end is not None:
        store.transition(e.id, final, at=end, finished_at=end)


def history(store: Store) -> None:
    """Two teams' past: jobs that ran on whole GPUs, MIG and shares, a retry, a failure, one still running,
    jobs cancelled while queued, and a sweep cancelled at once."""
    a = store.add([job("vision", 1000.0), job("vision", 1100.0, kind="mig", job_class="serving"),
                   job("nlp", 1200.0, kind="share", job_class="hpo"), job("nlp", 1300.0),
                   job("vision", 1400.0, kind="cpu"), job("nlp", 1500.0)])
    run(store, a[0], GPU, 1010.0, 4600.0)
    run(store, a[1], MIG, 1500.0, 9000.0, retry_at=3000.0)
    run(store, a[2], SHARE, 1200.0, 2000.0, final=EntryState.FAILED)
    run(store, a[3], GPU, 1400.0, None)
    store.transition(a[4].id, EntryState.CANCELLED, at=1450.0, finished_at=1450.0)
    trials = store.add([QueueEntry(id="", name=f"hp-t{i}", team="nlp", priority=50, spec=spec("nlp"),
                                   submitted_at=2000.0, sweep="hp-s1") for i in range(40)])
    store.cancel_queued([t.id for t in trials], 2500.0, "cancelled by user")
    # preemption: one attempt taken back and queued again (its work lost), one that exited 0 in its grace
    p = store.add([job("vision", 5000.0, job_class="exploratory"), job("nlp", 5100.0, job_class="hpo")])
    for e, lost in zip(p, (True, False), strict=True):
        store.transition(e.id, EntryState.ADMITTED, at=5200.0, admitted_at=5200.0, placements=(GPU,))
        store.transition(e.id, EntryState.RUNNING, at=5205.0)
        store.transition(e.id, EntryState.PREEMPTING, at=6000.0, reason="preempted by q000001 (serving) on n1")
        if lost:
            store.transition(e.id, EntryState.QUEUED, at=6030.0, placements=(), attempts=1, refusals=1)
            store.transition(e.id, EntryState.ADMITTED, at=7000.0, placements=(GPU,))
            store.transition(e.id, EntryState.COMPLETE, at=8000.0, finished_at=8000.0)
        else:
            store.transition(e.id, EntryState.COMPLETE, at=6010.0, finished_at=6010.0)


WINDOWS = [(0.0, 20000.0), (1200.0, 3000.0), (2600.0, 20000.0), (4600.0, 4601.0), (9000.0, 20000.0)]


def expected(store: Store, by: str, since: float, until: float, now: float,
             team: str | None = None) -> list[dict[str, Any]]:
    entries = [e for e in store.list() if team is None or e.team == team]
    idle = ("idle_gpu_hours", "reclaimed_gpu_hours", "reclaims")  # idle reclaim's accounts add them, not the store
    return [{k: v for k, v in r.to_json().items() if k not in idle}
            for r in usage_rows(entries, Window(since, until), now, by)]


def got(store: Store, by: str, since: float, until: float, now: float,
        team: str | None = None) -> list[dict[str, Any]]:
    return [dict(vars(r)) for r in store.usage_report(by, since, until, now, team)]


def answers(store: Store, now: float = 20000.0) -> dict[tuple[str, float, float, str | None], Any]:
    return {(by, s, u, team): got(store, by, s, u, now, team)
            for by in GROUPINGS for s, u in WINDOWS for team in (None, "vision", "nlp")}
