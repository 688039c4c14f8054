"""A new queue database beside a cluster where this service's jobs still run is refused at start.

The database is the only record of what the service started. When it is lost, replaced by an empty file
or pointed at by mistake, SQLite makes a new one, the new database gets a new job-ID prefix, and the jobs
the old one ran stay on their GPUs with nobody to stop them, count them or learn how they ended. Every
job carries the service's configured name in its meta (`nomad_gpu_service`), so a new database looks at
Nomad's live allocations of jobs shaped like ours, reads each job's meta, and refuses to start while any
of them is this service's: restore the database, or start with ``--ignore-existing-jobs`` to leave them
to Nomad (they are then another service's usage, never stopped). Nomad unreachable at that moment is
logged and the start goes on: a first start must not depend on Nomad being up.
"""

from __future__ import annotations

import logging

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.nomad.client import NomadClient, NomadError
from nomad_gpu.nomad.decode import decode_alloc
from nomad_gpu.service.actuator import META_SERVICE, Actuator
from nomad_gpu.store.entries import parse_job_id

logger = logging.getLogger(__name__)


def live_jobs_of(client: NomadClient, actuator: Actuator, service_name: str) -> list[str]:
    """IDs of the jobs that run (or wait to) in Nomad and carry ``service_name`` in their meta."""
    _, raw_allocs, _, _ = client.snapshot()
    candidates = sorted({(a.job_id, a.namespace) for a in map(decode_alloc, raw_allocs)
                         if not a.client_status.is_terminal() and parse_job_id(a.job_id) is not None})
    found: list[str] = []
    for job_id, namespace in candidates:
        state = actuator.job_state(job_id, namespace)
        if state is not None and not state.stopped and state.meta.get(META_SERVICE) == service_name:
            found.append(job_id)
    return found


def check_new_database(client: NomadClient, actuator: Actuator, service_name: str, *, ignore: bool) -> None:
    """InvalidRequest (one line) when a new database would start beside live jobs of this service."""
    try:
        live = live_jobs_of(client, actuator, service_name)
    except NomadError as exc:
        logger.warning("the queue database is new and Nomad could not be asked for jobs of service %r (%s): "
                       "starting anyway", service_name, exc)
        return
    if not live:
        return
    shown = ", ".join(live[:5]) + (f" and {len(live) - 5} more" if len(live) > 5 else "")
    if ignore:
        logger.warning("the queue database is new; %d job(s) of service %r run in Nomad (%s) and are left to it",
                       len(live), service_name, shown)
        return
    raise InvalidRequest(f"the queue database is new, but Nomad runs {len(live)} job(s) of service "
                         f"{service_name!r} ({shown}): start with the database that queued them (or restore it "
                         "from a backup), or pass --ignore-existing-jobs to leave them to Nomad")
