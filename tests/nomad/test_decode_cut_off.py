"""Allocations of a node cut off from Nomad's servers, as the service reads them (nomad/decode.py).

`lost` and `unknown` say the servers cannot hear the node: its task may still run (client/heartbeatstop.go,
v2.0.5). A task the client killed by itself (`stop_on_client_after`) ends `complete` with desired `run`,
and the client's report overwrites `lost` (`nestedUpdateAllocFromClient`, nomad/state/state_store.go): its
last task event is `Killed`, never a `Terminated` exit, so it did not succeed.
"""

from __future__ import annotations

from typing import Any

import pytest

from nomad_gpu.nomad.decode import AllocStatus, decode_alloc


def _raw(status: str, events: list[str]) -> dict[str, Any]:
    return {"ID": "a1", "JobID": "ngpu-q000001", "TaskGroup": "main", "NodeID": "n1", "ClientStatus": status,
            "DesiredStatus": "run", "TaskStates": {"main": {"State": "dead", "Events": [
                {"Type": kind, "ExitCode": 0} for kind in events]}}}


@pytest.mark.parametrize(("status", "cut_off"), [("lost", True), ("unknown", True), ("running", False),
                                                 ("complete", False)])
def test_lost_and_unknown_are_cut_off(status: str, cut_off: bool) -> None:
    assert decode_alloc(_raw(status, ["Started"])).cut_off is cut_off


def test_a_task_the_client_killed_by_itself_did_not_succeed() -> None:
    killed = decode_alloc(_raw("complete", ["Started", "Killing", "Killed"]))
    assert killed.client_status is AllocStatus.COMPLETE and killed.desired_status == "run"
    assert not killed.succeeded
    assert killed.outcome() == "killed on its node (desired run)"
    done = decode_alloc(_raw("complete", ["Started", "Terminated"]))
    assert done.succeeded


def _ended(status: str, desired: str, last_event: str, description: str = "") -> dict[str, Any]:
    events = [{"Type": "Started"}, {"Type": "Killing"}, {"Type": "Terminated", "ExitCode": 137}, {"Type": last_event}]
    return {"ID": "a1", "JobID": "j", "ClientStatus": status, "DesiredStatus": desired,
            "DesiredDescription": description, "TaskStates": {"work": {"State": "dead", "Events": events}}}


@pytest.mark.parametrize(("raw", "cut"), [
    # its own client killed it, cut off past stop_on_client_after (client/heartbeatstop.go, v2.0.5)
    pytest.param(_ended("complete", "run", "Killed"), True, id="killed-by-its-client"),
    # the servers' lost verdict (scheduler/structs/const.go v2.0.5), reported ended on reconnect
    pytest.param(_ended("complete", "stop", "Killed", "alloc is lost since its node is down"), True, id="lost-verdict"),
    pytest.param(_ended("complete", "stop", "Killed", "alloc not needed due to job update"), False, id="stopped"),
    pytest.param(_ended("complete", "run", "Terminated"), False, id="ran-out"),
    # a task group's failure kills its siblings (`Sibling Task Failed`, then `Killed`): a failure, not a cut-off
    pytest.param(_ended("failed", "run", "Killed"), False, id="sibling-killed"),
    pytest.param(_ended("lost", "stop", "Started", "alloc is lost since its node is down"), False, id="lost-live"),
])
def test_an_attempt_ended_by_its_nodes_cut_off_is_told_from_facts_that_outlive_a_restart(
        raw: dict[str, Any], cut: bool) -> None:
    assert decode_alloc(raw).ended_cut_off is cut
