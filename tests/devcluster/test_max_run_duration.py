"""A batch group's `max_run_duration` (Nomad 2.0.3, #27803): parsed and validated where the version has
it (`TaskGroup.Validate`, nomad/structs/structs.go v2.0.3), refused by the HCL parser before, and
enforced at `CreateTime + max_run_duration` as `complete`, "allocation exceeded max_run_duration"
(`EnforceMaxRunDurationTimeout`, client/allocrunner/alloc_runner.go v2.0.3)."""

from __future__ import annotations

import nomad
import pytest
import requests

from .conftest import CLUSTERS, ClusterFactory
from .helpers import StreamReader, job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # each test starts a dev cluster


def _with_max_run(hcl: str, value: str) -> str:
    return hcl.replace("    count = 1\n", f'    count = 1\n    max_run_duration = "{value}"\n', 1)


def _parse(url: str, hcl: str) -> requests.Response:
    return requests.post(f"{url}/v1/jobs/parse", json={"JobHCL": hcl, "Canonicalize": True}, timeout=5)


@pytest.mark.parametrize("version", ["2.0.2", "1.11.3", "1.10.5"])
def test_versions_before_2_0_3_refuse_the_attribute(make_cluster: ClusterFactory, version: str) -> None:
    cluster = make_cluster(CLUSTERS / "seed-a800.yaml", nomad_version=version)
    reply = _parse(cluster.url, _with_max_run(jobspec("timed", gpus=1, duration=60), "30s"))
    assert reply.status_code == 400
    assert 'An argument named "max_run_duration" is not expected here' in reply.text


def test_2_0_3_parses_the_attribute_and_refuses_it_on_a_service_job(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(CLUSTERS / "seed-a800.yaml", nomad_version="2.0.3")
    parsed = _parse(cluster.url, _with_max_run(jobspec("timed", gpus=1, duration=60), "1m30s"))
    assert parsed.status_code == 200
    assert parsed.json()["TaskGroups"][0]["MaxRunDuration"] == 90 * 10**9
    service = _parse(cluster.url, _with_max_run(jobspec("web", gpus=1, job_type="service"), "30s")).json()
    reply = requests.post(f"{cluster.url}/v1/jobs", json={"Job": service}, timeout=5)
    assert reply.status_code == 500
    assert 'Job type "service" does not allow max_run_duration' in reply.text


def test_the_deadline_kills_the_task_and_completes_the_allocation(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(CLUSTERS / "seed-a800.yaml", nomad_version="2.0.3", speed=1000.0)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    submit(client, _with_max_run(jobspec("timed", gpus=1, duration=36000), "1h"))  # 3.6 s at speed 1000
    (alloc,) = wait_until(lambda: [a for a in job_allocs(cluster.audit(), "timed")
                                   if a["client_status"] == "complete"], timeout=10, what="the deadline")
    assert alloc["max_run_exceeded"] is True
    assert (alloc["finished_at"] - alloc["created_at"]) * 1000.0 >= 3600, "never before the deadline"
    full = requests.get(f"{cluster.url}/v1/allocation/{alloc['alloc_id']}", timeout=5).json()
    assert full["ClientDescription"] == "allocation exceeded max_run_duration"
    task = full["TaskStates"]["work"]
    assert (task["State"], task["Failed"]) == ("dead", False)
    assert [e["Type"] for e in task["Events"]][-2:] == ["Killing", "Killed"]
    assert task["Events"][-2]["DisplayMessage"] == "allocation exceeded max_run_duration"


def test_the_timeout_is_said_on_the_allocation_event(make_cluster: ClusterFactory) -> None:
    """`AllocationEvent.Timeout`/`TimeoutReason` (nomad/structs/event.go), set when the allocation is
    `complete` with the max_run_duration reason (`eventFromChange`, nomad/state/events.go v2.0.5); both
    `omitempty`, so other events lack the keys."""
    cluster = make_cluster(CLUSTERS / "seed-a800.yaml", nomad_version="2.0.5", speed=1000.0)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    reader = StreamReader(cluster.url, [("topic", "Allocation")])
    submit(client, _with_max_run(jobspec("timed", gpus=1, duration=36000), "1h"))
    final = reader.wait_for(lambda e: e["Payload"]["Allocation"]["ClientStatus"] == "complete", timeout=10)
    assert (final["Payload"]["Timeout"], final["Payload"]["TimeoutReason"]) == (
        True, "allocation exceeded max_run_duration")
    earlier = [e for e in reader.events if e["Payload"]["Allocation"]["ClientStatus"] != "complete"]
    assert earlier and all("Timeout" not in e["Payload"] and "TimeoutReason" not in e["Payload"] for e in earlier)
    reader.close()
