"""A waiting entry is held in memory without its tasks' env and args (issue 26, item 4): each queued entry
held its spec twice, as stored data and as the validated model, 0.42 MiB of Python heap for the largest
allowed spec. The register loads the full spec from the store, so the rendered job loses nothing."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, gpu_node, service, spec

from nomad_gpu.render import JobSpec
from nomad_gpu.render.placement import RenderPlacement
from nomad_gpu.service.asks.translate import spec_of
from nomad_gpu.service.life import register
from nomad_gpu.store import EntryState, QueueEntry, SqliteStore

ENV = {f"K{i}": "x" * 200 for i in range(1000)}
ARGS = [f"--flag-{i}" for i in range(50)]


class Recording(FakeNomad):  # type: ignore[misc]  # `fakes` is imported by its bare name: Any to mypy
    def __init__(self) -> None:
        super().__init__()
        self.rendered: list[JobSpec] = []

    def submit(self, entry: QueueEntry, spec: JobSpec, placement: RenderPlacement) -> str:
        self.rendered.append(spec)
        return super().submit(entry, spec, placement)


def big(name: str) -> dict[str, Any]:
    return {**spec(name), "task": {"image": "busybox", "env": ENV, "args": ARGS}}


def assert_lean(svc: Any, entry_id: str) -> None:
    t = svc.life.entries[entry_id]
    assert t.spec is not None and all(not g.task.env and not g.task.args for g in t.spec.groups)
    assert all("env" not in g["task"] and "args" not in g["task"] for g in t.entry.spec["groups"])


def test_a_waiting_entry_is_held_lean_and_registered_whole(tmp_path: Any) -> None:
    nomad, clock, ex = Recording(), Clock(), ManualExecutor()
    store = SqliteStore(str(tmp_path / "q.db"))
    svc = service(store, nomad, clock, ex)
    svc.on_resync([gpu_node("n1", 1)], [])
    (a,) = svc.submit(big("a"))
    (b,) = svc.submit(big("b"))
    assert_lean(svc, a.id)
    assert store.get(a.id).spec["groups"][0]["task"]["env"] == ENV, "the store keeps the whole spec"
    svc.hold(b.id)
    svc.update(b.id, priority=90)
    assert_lean(svc, b.id)
    svc.release(b.id)
    svc.run_cycle()
    ex.run_all()
    assert store.get(b.id).state is EntryState.ADMITTED
    (rendered,) = nomad.rendered
    assert rendered.groups[0].task.env == ENV and rendered.groups[0].task.args == ARGS
    svc.stop()
    store.close()
    again = SqliteStore(str(tmp_path / "q.db"))  # a restart tracks the waiting one from the store: lean too
    svc2 = service(again, nomad, clock, ManualExecutor())
    assert_lean(svc2, a.id)
    svc2.stop()


def test_a_spec_with_nothing_to_leave_out_is_held_whole_and_registered_without_a_store_read(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The register reads the stored spec back only when the held one lacks something: a spec without env
    or args is held as validated, and registered from memory (one store read and validation per job less)."""
    nomad, clock, ex = Recording(), Clock(), ManualExecutor()
    store = SqliteStore(str(tmp_path / "q.db"))
    svc = service(store, nomad, clock, ex)
    svc.on_resync([gpu_node("n1", 2)], [])
    (plain,) = svc.submit(spec("plain"))
    (whole,) = svc.submit(big("whole"))
    held = svc.life.entries[plain.id].spec
    read_back: list[str] = []

    def counted(entry: QueueEntry) -> JobSpec:
        read_back.append(entry.id)
        return spec_of(entry)

    monkeypatch.setattr(register, "spec_of", counted)
    svc.run_cycle()
    ex.run_all()
    assert store.get(plain.id).state is EntryState.ADMITTED and store.get(whole.id).state is EntryState.ADMITTED
    rendered = {s.name: s for s in nomad.rendered}
    assert rendered["plain"] is held, "the held spec was registered as it is"
    assert rendered["whole"].groups[0].task.env == ENV and rendered["whole"].groups[0].task.args == ARGS
    assert read_back == [whole.id]
    svc.stop()
    store.close()
