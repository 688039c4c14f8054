"""A new queue database beside a cluster where this service's jobs still run is refused at start.

The database is the only record of what the service started. When it is lost, replaced by an empty file
or pointed at by mistake, SQLite makes a new one, the new database gets a new job-ID prefix, and the jobs
the old one ran stay on their GPUs with nobody to stop them, count them or learn how they ended. Every
job carries the service's configured name in its meta (`nomad_gpu_service`), so a new database looks at
Nomad's live allocations of jobs shaped like ours, reads each job's meta, and refuses to start while any
of them is this service's: restore the database, start with ``--ignore-existing-jobs`` to leave them to
Nomad, or with ``--adopt-existing-jobs`` to take them on as bookings. Either way they are never stopped:
the new database's job prefix differs, so every allocation of theirs is booked in the ledger as Nomad's
own usage (service/life/foreign.py) from the first reconcile until Nomad reports it ended, and no new entry is
placed onto their GPUs. Adopting says so on one log line per job (its allocations, nodes and devices),
so the operator can find each one; ignoring logs them as a group. Nomad unreachable at that moment is
logged and the start goes on: a first start must not depend on Nomad being up.
"""

from __future__ import annotations

import logging

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.nomad.client import NomadClient, NomadError
from nomad_gpu.nomad.decode import AllocInfo, decode_alloc
from nomad_gpu.service.life.actuator import META_SERVICE, Actuator
from nomad_gpu.store.entries import parse_job_id

logger = logging.getLogger(__name__)


BOTH_FLAGS = "--adopt-existing-jobs and --ignore-existing-jobs exclude each other: pass one of them"


def live_allocs_of(client: NomadClient, actuator: Actuator, service_name: str) -> dict[str, list[AllocInfo]]:
    """The live allocations of each job that runs (or waits to) in Nomad with ``service_name`` in its meta."""
    _, raw_allocs, _, _ = client.snapshot()
    by_job: dict[tuple[str, str], list[AllocInfo]] = {}
    for a in map(decode_alloc, raw_allocs):
        if not a.client_status.is_terminal() and parse_job_id(a.job_id) is not None:
            by_job.setdefault((a.job_id, a.namespace), []).append(a)
    found: dict[str, list[AllocInfo]] = {}
    for (job_id, namespace), allocs in sorted(by_job.items()):
        state = actuator.job_state(job_id, namespace)
        if state is not None and not state.stopped and state.meta.get(META_SERVICE) == service_name:
            found[job_id] = allocs
    return found


def live_jobs_of(client: NomadClient, actuator: Actuator, service_name: str) -> list[str]:
    """IDs of the jobs that run (or wait to) in Nomad and carry ``service_name`` in their meta."""
    return list(live_allocs_of(client, actuator, service_name))


def check_new_database(client: NomadClient, actuator: Actuator, service_name: str, *, ignore: bool,
                       adopt: bool = False) -> None:
    """InvalidRequest (one line) when a new database would start beside live jobs of this service."""
    if ignore and adopt:
        raise InvalidRequest(BOTH_FLAGS)
    try:
        live = live_allocs_of(client, actuator, service_name)
    except NomadError as exc:
        logger.warning("the queue database is new and Nomad could not be asked for jobs of service %r (%s): "
                       "starting anyway", service_name, exc)
        return
    if not live:
        return
    shown = ", ".join(list(live)[:5]) + (f" and {len(live) - 5} more" if len(live) > 5 else "")
    if adopt:
        for job_id, allocs in live.items():
            held = "; ".join(f"alloc {a.id} on node {a.node_id} ({', '.join(a.device_ids) or 'no devices'})"
                             for a in allocs)
            logger.warning("the queue database is new; adopting job %s of service %r: %s booked as Nomad's "
                           "usage until it ends, nothing stopped", job_id, service_name, held)
        return
    if ignore:
        logger.warning("the queue database is new; %d job(s) of service %r run in Nomad (%s) and are left to it",
                       len(live), service_name, shown)
        return
    raise InvalidRequest(f"the queue database is new, but Nomad runs {len(live)} job(s) of service "
                         f"{service_name!r} ({shown}): start with the database that queued them (or restore it "
                         "from a backup), pass --adopt-existing-jobs to book them until they end, or "
                         "--ignore-existing-jobs to leave them to Nomad")
