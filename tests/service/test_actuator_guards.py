"""Guards of the register path that no test held (issue 26, item 16): a create-only register that finds the
job already there adopts it only when its meta says it is this entry's attempt of this database; another
service's job (or another attempt's) of the same ID is never taken for ours."""

from __future__ import annotations

from typing import Any

import pytest

from nomad_gpu.nomad.client import NomadJobExists, NomadRejected
from nomad_gpu.service.life.actuator import META_ATTEMPT, META_INSTANCE, Actuator
from nomad_gpu.store import QueueEntry

ENTRY = QueueEntry(id="q000001", name="j", team="t", priority=50, spec={}, submitted_at=0.0, attempts=2,
                   job_prefix="abc123")


class ExistingJob:
    """Our NomadClient's surface for a register that finds the job already there, with ``meta``."""

    def __init__(self, meta: dict[str, str]) -> None:
        self.meta = meta

    def parse(self, hcl: str) -> dict[str, Any]:
        return {"ID": ENTRY.nomad_job_id}

    def register(self, job: Any, hcl: str, *, create_only: bool, namespace: str | None = None) -> None:
        assert create_only
        raise NomadJobExists("register: the job already exists")

    def job(self, job_id: str, namespace: str | None = None) -> dict[str, Any]:
        return {"ID": job_id, "Status": "running", "Meta": self.meta}

    def job_allocations(self, job_id: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return []


def actuator(meta: dict[str, str]) -> Actuator:
    act = Actuator(ExistingJob(meta))  # type: ignore[arg-type]
    act.render_with_job = lambda entry, spec, placement: ("hcl", None)  # type: ignore[method-assign]
    return act


OURS = {"nomad_gpu_entry": "q000001", META_ATTEMPT: "2", META_INSTANCE: "abc123"}


def test_our_own_earlier_register_is_adopted() -> None:
    assert actuator(OURS).submit(ENTRY, None, None) == "hcl"  # type: ignore[arg-type]


@pytest.mark.parametrize("meta", [
    pytest.param({**OURS, META_INSTANCE: "ffffff"}, id="another-database"),
    pytest.param({**OURS, META_ATTEMPT: "1"}, id="another-attempt"),
    pytest.param({}, id="not-ours-at-all"),
])
def test_a_job_of_the_same_id_that_is_not_this_attempt_is_never_adopted(meta: dict[str, str]) -> None:
    with pytest.raises(NomadRejected, match="belongs to someone else"):
        actuator(meta).submit(ENTRY, None, None)  # type: ignore[arg-type]
