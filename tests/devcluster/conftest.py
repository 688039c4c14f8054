"""Fixtures: dev clusters started on a free loopback port and always stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import nomad
import pytest

from nomad_gpu.devcluster import DevCluster

CLUSTERS = Path(__file__).resolve().parents[2] / "clusters"

# Two small nodes in two datacenters: enough for binpacking and datacenter tests.
TWO_NODES: dict[str, Any] = {
    "name": "two-nodes",
    "nodes": [
        {"name": "n1", "cpu_shares": 8000, "memory_mb": 16384,
         "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_mib": 81920}]},
        {"name": "n2", "cpu_shares": 8000, "memory_mb": 16384,
         "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_mib": 81920}]},
        {"name": "n3", "datacenter": "dc2", "cpu_shares": 8000, "memory_mb": 16384,
         "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_mib": 81920}]},
    ],
}

ClusterFactory = Callable[..., DevCluster]


@pytest.fixture(scope="session")
def _background_stops() -> Iterator[list[threading.Thread]]:
    """uvicorn takes ~0.2 s to shut down; tests hand their clusters here and the session waits once."""
    threads: list[threading.Thread] = []
    yield threads
    for thread in threads:
        thread.join(10)


@pytest.fixture
def make_cluster(_background_stops: list[threading.Thread]) -> Iterator[ClusterFactory]:
    started: list[DevCluster] = []

    def make(spec: Mapping[str, Any] | str | Path = CLUSTERS / "seed-a800.yaml", *, speed: float = 1000.0,
             **options: Any) -> DevCluster:
        cluster = DevCluster(spec, speed=speed, **options)
        cluster.start()
        started.append(cluster)
        return cluster

    yield make
    for cluster in started:
        cluster.drop_streams()  # readers see their streams end before the test is over
        thread = threading.Thread(target=cluster.stop, daemon=True)
        thread.start()
        _background_stops.append(thread)


@pytest.fixture
def seed(make_cluster: ClusterFactory) -> DevCluster:
    return make_cluster()


@pytest.fixture
def client(seed: DevCluster) -> nomad.Nomad:
    return nomad.Nomad(address=seed.url, timeout=5)


@pytest.fixture(scope="module")
def shared_mixed() -> Iterator[DevCluster]:
    """A read-mostly mixed-fleet cluster shared by a module (tests must not leave work on it)."""
    cluster = DevCluster(CLUSTERS / "mixed-fleet.yaml", speed=1000.0)
    cluster.start()
    yield cluster
    cluster.stop()
