"""Whether every agent has `max_run_duration` is read once for all registers in flight, from the plain node
list. The actuator's workers start a burst together: each used to list every node with its resources (the
whole fleet's devices) to read one `Version` field per node, eight lists at once on the first burst."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.nomad.client import NomadClient
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.life.actuator import Actuator

CLUSTER = Path(__file__).resolve().parents[2] / "clusters" / "mig-h100.yaml"


class SlowAgents:
    """Answers the two version reads slowly, counting them, as a Nomad busy with a burst would."""

    def __init__(self) -> None:
        self.reads = 0
        self.lock = threading.Lock()

    def server_members(self) -> dict[str, Any]:
        with self.lock:
            self.reads += 1
        time.sleep(0.05)
        return {"Members": [{"Tags": {"build": "2.0.5"}}]}

    def nodes(self, resources: bool = True) -> list[dict[str, Any]]:
        assert not resources, "the versions need no devices"
        time.sleep(0.05)
        return [{"Version": "2.0.5"}]


def test_registers_starting_together_read_the_versions_once() -> None:
    agents = SlowAgents()
    actuator = Actuator(agents)  # type: ignore[arg-type]
    answers: list[bool] = []
    start = threading.Barrier(8)

    def register() -> None:
        start.wait()
        answers.append(actuator.max_run_duration())

    threads = [threading.Thread(target=register) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert answers == [True] * 8
    assert agents.reads == 1


@pytest.fixture(scope="module")
def client() -> Iterator[NomadClient]:
    dc = DevCluster(CLUSTER)
    url = dc.start()
    yield NomadClient(NomadSettings(address=url))
    dc.stop()


@pytest.mark.server
def test_the_versions_come_from_the_plain_node_list(client: NomadClient) -> None:
    (stub,) = client.nodes(resources=False)
    assert stub["Version"] and "NodeResources" not in stub
    assert Actuator(client).max_run_duration() is True
