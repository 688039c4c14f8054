"""The service without Nomad: API and access tests never admit (no inventory), so nothing may reach Nomad."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore


class NoActuator:
    def submit(self, *args: Any, **kwargs: Any) -> str:
        raise AssertionError("no registration expected")

    def stop(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("no stop expected")

    def job_state(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("no read expected")

    def ping(self) -> None:
        raise AssertionError("no probe expected")


@pytest.fixture
def service() -> Iterator[SchedulerService]:
    svc = SchedulerService(SqliteStore(), NoActuator(), SchedulingSettings())
    yield svc
    svc.stop()
