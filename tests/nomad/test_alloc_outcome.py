"""How an allocation ended, read as Nomad writes it (client/allocrunner, v2.0.5): a service job's task
that exits 0 with no restarts allowed ends `failed`, and that is still a success; a kill, a non-zero
exit or a failure after a restart is not. Batch allocations keep their meaning."""

from __future__ import annotations

from typing import Any

import pytest

from nomad_gpu.nomad.decode import decode_alloc


def _event(kind: str, code: int = 0) -> dict[str, Any]:
    return {"Type": kind, "ExitCode": code, "FailsTask": kind == "Not Restarting", "Time": 1}


def _alloc(client: str, *events: dict[str, Any], desired: str = "run") -> dict[str, Any]:
    return {"ID": "a1", "JobID": "j", "TaskGroup": "main", "NodeID": "n1", "ClientStatus": client,
            "DesiredStatus": desired,
            "TaskStates": {"work": {"State": "dead", "Failed": client == "failed",
                                    "Events": [_event("Received"), _event("Started"), *events]}}}


@pytest.mark.parametrize(("raw", "succeeded", "outcome"), [
    pytest.param(_alloc("failed", _event("Terminated"), _event("Not Restarting")), True, "complete",
                 id="service-exit-0-no-restarts"),
    pytest.param(_alloc("complete", _event("Terminated")), True, "complete", id="batch-exit-0"),
    pytest.param(_alloc("failed", _event("Terminated", 1), _event("Not Restarting")), False, "failed",
                 id="exit-1"),
    pytest.param(_alloc("failed", _event("Terminated"), _event("Restarting"), _event("Driver Failure"),
                        _event("Not Restarting")), False, "failed", id="exit-0-then-a-failed-restart"),
    pytest.param(_alloc("failed", _event("Killing"), _event("Terminated"), _event("Killed")), False, "failed",
                 id="killed-with-exit-0"),
    pytest.param(_alloc("failed", _event("Terminated"), _event("Not Restarting"), desired="stop"), False,
                 "failed", id="exit-0-but-stopped"),
    pytest.param(_alloc("failed"), False, "failed", id="no-task-exit"),
])
def test_success_is_read_from_the_task_exits(raw: dict[str, Any], succeeded: bool, outcome: str) -> None:
    info = decode_alloc(raw)
    assert info.succeeded is succeeded
    assert info.outcome() == outcome


def test_every_task_must_have_exited_0() -> None:
    raw = _alloc("failed", _event("Terminated"), _event("Not Restarting"))
    raw["TaskStates"]["sidecar"] = {"State": "dead", "Failed": True,
                                    "Events": [_event("Terminated", 2), _event("Not Restarting")]}
    assert not decode_alloc(raw).succeeded


def test_hostile_task_states_are_not_success() -> None:
    states: object
    for states in (None, [], {"work": None}, {"work": {"Events": "x"}}, {"work": {"Events": {"0": 1}}},
                   {"work": {"Events": [None]}}):
        raw = _alloc("failed")
        raw["TaskStates"] = states
        assert not decode_alloc(raw).succeeded
