"""Which agents have `max_run_duration` (Nomad 2.0.3+), from the servers' `Tags["build"]` and the nodes'
`Version`; and an allocation Nomad ended at that deadline is a time-out, not a success."""

from __future__ import annotations

from typing import Any

from nomad_gpu.nomad import versions
from nomad_gpu.nomad.decode import decode_alloc


def _members(*builds: str) -> dict[str, Any]:
    return {"ServerName": "s1.global", "Members": [{"Name": f"s{i}", "Tags": {"build": b, "role": "nomad"}}
                                                   for i, b in enumerate(builds)]}


def test_every_agent_must_be_2_0_3_or_later() -> None:
    new = versions.server_versions(_members("2.0.3", "2.0.5+ent")) + versions.node_versions(
        [{"Version": "2.0.4"}, {"Version": "v2.1.0-dev"}])
    assert versions.all_have(new, versions.MAX_RUN_DURATION)
    one_old = new + versions.node_versions([{"Version": "2.0.2"}])
    assert not versions.all_have(one_old, versions.MAX_RUN_DURATION)
    assert not versions.all_have(versions.server_versions(_members("1.11.3")), versions.MAX_RUN_DURATION)


def test_unknown_or_no_versions_mean_no() -> None:
    assert not versions.all_have([], versions.MAX_RUN_DURATION)
    assert not versions.all_have(versions.node_versions([{"Version": ""}, {}]), versions.MAX_RUN_DURATION)
    assert versions.server_versions({"Members": None}) == []
    assert versions.parse_version("2.0") is None


def _alloc(description: str) -> dict[str, Any]:
    return {"ID": "a1", "JobID": "j", "ClientStatus": "complete", "DesiredStatus": "run",
            "ClientDescription": description,
            "TaskStates": {"work": {"Events": [{"Type": "Started"}, {"Type": "Killing"}, {"Type": "Killed"}]}}}


def test_an_allocation_ended_at_max_run_duration_is_a_timeout() -> None:
    timed_out = decode_alloc(_alloc("allocation exceeded max_run_duration"))
    assert timed_out.max_run_exceeded and not timed_out.succeeded
    assert timed_out.outcome() == "timed out (max_run_duration)"
    ended = _alloc("All tasks have completed")  # by itself: a kill with desired run is its client's own stop
    ended["TaskStates"]["work"]["Events"] = [{"Type": "Started"}, {"Type": "Terminated", "ExitCode": 0}]
    assert decode_alloc(ended).succeeded
