"""Fixtures shared by the end-to-end tests: the seed cluster (8 x A800) at speed 10."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness import dev_cluster

from nomad_gpu.devcluster import DevCluster


@pytest.fixture
def seed() -> Iterator[DevCluster]:
    dc = dev_cluster("seed-a800", speed=10.0)
    yield dc
    dc.stop()
