"""Network faults in front of the dev cluster: lost register replies and outages, judged from the
cluster's side (faults.py)."""

from __future__ import annotations

import time
from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import TWO_NODES, ClusterFactory
from .helpers import StreamReader, job_allocs, jobspec, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


class FakeClock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _register_body(client: nomad.Nomad, job_id: str) -> dict[str, object]:
    return {"Job": client.jobs.parse(jobspec(job_id, gpus=1, duration=3600), canonicalize=True)}


@pytest.mark.parametrize("mode", ["reset", "close"])
def test_a_lost_reply_still_registers_the_job(seed: DevCluster, client: nomad.Nomad, mode: str) -> None:
    seed.lose_replies(1, mode)
    with pytest.raises(requests.ConnectionError):
        requests.post(f"{seed.url}/v1/jobs", json=_register_body(client, "lost"), timeout=5)
    # Nomad applied it: the job is there and placed; the next register is answered.
    assert client.job.get_job("lost")["Version"] == 0
    wait_until(lambda: job_allocs(seed.audit(), "lost"))
    again = requests.post(f"{seed.url}/v1/job/lost", json=_register_body(client, "lost"), timeout=5)
    assert again.status_code == 200 and client.job.get_job("lost")["Version"] == 0
    assert len(job_allocs(seed.audit(), "lost")) == 1
    faults = seed.audit()["faults"]
    assert (faults["replies_lost"], faults["replies_to_lose"]) == (1, 0)


def test_a_late_reply_times_the_client_out(seed: DevCluster, client: nomad.Nomad) -> None:
    delay: dict[str, Any] = {"count": 1, "mode": "delay", "delay_s": 0.5}
    requests.post(f"{seed.url}/_dev/lose-replies", params=delay, timeout=5)
    with pytest.raises(requests.Timeout):
        requests.post(f"{seed.url}/v1/jobs", json=_register_body(client, "slow"), timeout=0.1)
    assert client.job.get_job("slow")["ID"] == "slow"


def test_only_registers_lose_replies(seed: DevCluster, client: nomad.Nomad) -> None:
    seed.lose_replies(1)
    assert requests.get(f"{seed.url}/v1/jobs", timeout=5).status_code == 200
    parsed = requests.post(f"{seed.url}/v1/jobs/parse", json={"JobHCL": jobspec("p")}, timeout=5)
    assert parsed.status_code == 200 and seed.faults()["replies_to_lose"] == 1


def test_an_outage_resets_every_api_request_and_counts_them(seed: DevCluster) -> None:
    reader = StreamReader(seed.url, [("topic", "Job")])
    wait_until(lambda: reader.heartbeats >= 1)
    assert seed.unreachable(60) == 1
    assert reader.ended.wait(5)
    for _ in range(4):
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{seed.url}/v1/jobs", timeout=5)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{seed.url}/v1/event/stream", stream=True, timeout=5)
    audit = requests.get(f"{seed.url}/_dev/audit", timeout=5).json()  # /_dev stays reachable
    assert audit["requests_refused"] == 5 and audit["faults"]["unreachable"] is True
    assert sum(audit["faults"]["refused_by_second"].values()) == 5
    assert 1 <= audit["faults"]["refused_max_per_second"] <= 5
    requests.post(f"{seed.url}/_dev/reachable", timeout=5)
    assert requests.get(f"{seed.url}/v1/jobs", timeout=5).status_code == 200
    assert seed.faults()["refused"] == 5
    reader.close()


def test_an_outage_ends_on_the_clusters_clock(make_cluster: ClusterFactory) -> None:
    clock = FakeClock()
    cluster = make_cluster(TWO_NODES, clock=clock)
    reply = requests.post(f"{cluster.url}/_dev/unreachable", params={"seconds": 15}, timeout=5)
    assert reply.json()["unreachable"] is True
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{cluster.url}/v1/nodes", timeout=5)
    clock.now += 14.9
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{cluster.url}/v1/nodes", timeout=5)
    clock.now += 0.2
    assert requests.get(f"{cluster.url}/v1/nodes", timeout=5).status_code == 200
    faults = cluster.faults()
    assert faults["refused"] == 2 and faults["requests"] == 3
    assert faults["outages"][0]["end"] - faults["outages"][0]["start"] == pytest.approx(15)


@pytest.mark.parametrize("params", [{"count": -1}, {"mode": "drop"}, {"delay_s": "x"}])
def test_bad_fault_parameters_are_400(seed: DevCluster, params: dict[str, Any]) -> None:
    assert requests.post(f"{seed.url}/_dev/lose-replies", params=params, timeout=5).status_code == 400
