"""The create-only register (issue 26, item 16): with `EnforceIndex` taken out of `NomadClient.register`,
no test failed. Here, against the dev cluster (which refuses as `nomad/job_endpoint.go` Register does): a
register whose reply was lost, sent again after a restart with other pins, must not change the job Nomad
already placed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.nomad.client import NomadClient, NomadJobExists
from nomad_gpu.nomad.connection import NomadSettings
from tests.devcluster.conftest import CLUSTERS
from tests.devcluster.helpers import job_allocs, jobspec, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    dc = DevCluster(CLUSTERS / "seed-a800.yaml", speed=1000.0)
    dc.start()
    yield dc
    dc.drop_streams()
    dc.stop()


def gpu_ids(client: NomadClient) -> list[str]:
    ids: list[str] = []
    for stub in client.nodes():
        node = client.node(stub["ID"])
        for group in (node.get("NodeResources") or {}).get("Devices") or []:
            ids += [i["ID"] for i in group.get("Instances") or []]
    return sorted(ids)


def test_a_retried_register_with_other_pins_leaves_the_placed_job_alone(cluster: DevCluster) -> None:
    client = NomadClient(NomadSettings(address=cluster.url, timeout_s=5))
    first, other = gpu_ids(client)[:2]

    def job(pin: str) -> dict[str, object]:
        return dict(client.api.jobs.parse(jobspec("ngpu-q1", gpus=1, duration=3600, pin=[pin]), canonicalize=True))

    cluster.lose_replies(1, "reset")  # Nomad applies the register; its reply never arrives
    with pytest.raises(Exception):  # noqa: B017 - any transport error: the point is what Nomad kept
        client.register(job(first), "hcl", create_only=True)
    placed = wait_until(lambda: job_allocs(cluster.audit(), "ngpu-q1"), what="the first register's allocation")
    # after a restart the service re-registers the entry, create-only, with the pins it now chose
    with pytest.raises(NomadJobExists):
        client.register(job(other), "hcl", create_only=True)
    assert client.api.job.get_job("ngpu-q1")["Version"] == 0
    def where(allocs: list[dict[str, object]]) -> list[tuple[object, object]]:
        return [(a["alloc_id"], a["device_ids"]) for a in allocs]

    assert where(job_allocs(cluster.audit(), "ngpu-q1")) == where(placed)
