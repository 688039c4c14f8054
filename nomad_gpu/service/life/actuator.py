"""Tells Nomad what the cycle decided: render HCL and its Job JSON -> register with the source.

A bundled template's Job JSON is built from the context its HCL is rendered from (render/jobjson.py,
proven equal to Nomad's parse by tests/render/test_job_json.py), saving one request per job; a
user's own templates directory, or `nomad: {local_parse: false}`, asks `/v1/jobs/parse` as before.

The Nomad job ID comes from the queue entry (its database's prefix, the entry and the attempt), and
the register is create-only: a register repeated after a lost reply or a crash finds its own job
there and takes it as done, and a job that names another entry or database is never overwritten
(DESIGN 3.6, 3.11). `NomadActuator` is the seam the life cycle is tested through.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nomad_gpu.nomad import versions
from nomad_gpu.nomad.client import NomadClient, NomadError, NomadJobExists, NomadNotFound, NomadRejected
from nomad_gpu.nomad.decode import AllocInfo, decode_alloc
from nomad_gpu.render import META_ENTRY, JobRenderer, JobSpec, RenderPlacement
from nomad_gpu.service.life.fencing import META_EPOCH
from nomad_gpu.store import QueueEntry

logger = logging.getLogger(__name__)

META_ATTEMPT = "nomad_gpu_attempt"
META_INSTANCE = "nomad_gpu_instance"
META_SERVICE = "nomad_gpu_service"
"""The service's configured name (`service_name`): whose job this is, across databases."""


@dataclass(frozen=True)
class JobState:
    """What Nomad says about one of our jobs, read back when events cannot tell (after a restart)."""

    status: str
    """Nomad's job status: pending, running or dead."""
    stopped: bool
    meta: Mapping[str, str]
    allocs: tuple[AllocInfo, ...] = ()


class NomadActuator(Protocol):
    def submit(self, entry: QueueEntry, spec: JobSpec, placement: RenderPlacement) -> str: ...
    def stop(self, job_id: str, namespace: str = "default") -> None: ...
    def job_state(self, job_id: str, namespace: str = "default") -> JobState | None: ...
    def ping(self) -> None: ...


VERSIONS_TTL_S = 60.0
"""How long the agents' versions are trusted before they are read again (an upgrade is rolled out
over minutes; a stale answer only means a job keeps the service's timer alone, or is refused once)."""


class Actuator:
    def __init__(self, client: NomadClient, templates_dir: Path | None = None, service_name: str = "nomad-gpu",
                 clock: Callable[[], float] = time.monotonic, *, local_parse: bool = True,
                 epoch: Callable[[], int | None] = lambda: None, stop_on_client_after: float | None = None) -> None:
        """``epoch``: the leader's epoch, written into every job's meta (service/life/fencing.py; None on SQLite)."""
        self.client = client
        self.epoch = epoch
        self.stop_on_client_after = stop_on_client_after
        """Seconds: each GPU group gets `disconnect { stop_on_client_after, replace = false }` (None: no block)."""
        self.service_name = service_name
        self.local_parse = local_parse
        """Build the Job JSON of bundled templates here instead of asking Nomad's parse."""
        self.renderer = JobRenderer(templates_dir) if templates_dir is not None else JobRenderer()
        self._clock = clock
        self._max_run_duration: tuple[float, bool] | None = None  # (read at, every agent has it)
        self._versions_lock = threading.Lock()

    def max_run_duration(self) -> bool:
        """Whether every server and client has `max_run_duration` (2.0.3+, nomad/versions.py). Read
        at most once a minute; an unreadable answer means no (the service's own timer still holds)."""
        with self._versions_lock:  # one read for every register in flight; the others take its answer
            now = self._clock()
            if self._max_run_duration is not None and now - self._max_run_duration[0] < VERSIONS_TTL_S:
                return self._max_run_duration[1]
            try:
                found = versions.server_versions(self.client.server_members()) + versions.node_versions(
                    self.client.nodes(resources=False))
                has = versions.all_have(found, versions.MAX_RUN_DURATION)
            except NomadError as exc:
                logger.warning("cannot read the Nomad versions (%s): max_runtime is kept by the service alone", exc)
                has = False
            self._max_run_duration = (now, has)
            return has

    def render(self, entry: QueueEntry, spec: JobSpec, placement: RenderPlacement) -> str:
        limit = spec.max_runtime is not None and self.max_run_duration()
        return self.renderer.render_job(spec, job_id=entry.nomad_job_id, placement=placement,
                                        extra_meta=self._extra_meta(entry),
                                        max_run_duration=limit, stop_on_client_after=self.stop_on_client_after)

    def render_with_job(self, entry: QueueEntry, spec: JobSpec,
                        placement: RenderPlacement) -> tuple[str, dict[str, Any] | None]:
        """The HCL and, where proven for its template, the Job JSON Nomad's parse would return (else None)."""
        if not (self.local_parse and self.renderer.bundled):
            return self.render(entry, spec, placement), None
        field = self.max_run_duration()  # whether the agents have `MaxRunDuration` (the parse's key)
        return self.renderer.render_job_json(spec, job_id=entry.nomad_job_id, placement=placement,
                                             extra_meta=self._extra_meta(entry),
                                             max_run_duration=spec.max_runtime is not None and field,
                                             max_run_duration_field=field,
                                             stop_on_client_after=self.stop_on_client_after)

    def submit(self, entry: QueueEntry, spec: JobSpec, placement: RenderPlacement) -> str:
        """Register the pinned job, create-only; returns the HCL. Raises NomadError / RenderError."""
        hcl, job = self.render_with_job(entry, spec, placement)
        if job is None:
            job = self.client.parse(hcl)
        try:
            self.client.register(job, hcl, create_only=True, namespace=entry.namespace)
        except NomadJobExists:
            found = self.job_state(entry.nomad_job_id, entry.namespace)
            if found is None or not _is_ours(found.meta, entry):
                raise NomadRejected(f"job {entry.nomad_job_id} exists in Nomad and belongs to someone else; "
                                    "it was not overwritten") from None
            logger.info("register %s: already registered (an earlier reply was lost)", entry.nomad_job_id)
            return hcl
        logger.info("registered %s for %s on node %s", entry.nomad_job_id, entry.id, placement.node_id)
        return hcl

    def stop(self, job_id: str, namespace: str = "default") -> None:
        """Stop, not purge: the UI keeps the job's definition and status until Nomad's own GC."""
        try:
            self.client.deregister(job_id, purge=False, namespace=namespace)
        except NomadNotFound:
            pass

    def job_state(self, job_id: str, namespace: str = "default") -> JobState | None:
        job = self.client.job(job_id, namespace=namespace)
        if job is None:
            return None
        allocs = tuple(decode_alloc(a) for a in self.client.job_allocations(job_id, namespace=namespace))
        return JobState(status=str(job.get("Status") or ""), stopped=bool(job.get("Stop")),
                        meta={str(k): str(v) for k, v in (job.get("Meta") or {}).items()}, allocs=allocs)


    def _extra_meta(self, entry: QueueEntry) -> dict[str, str]:
        epoch = self.epoch()
        return {**_meta(entry), META_SERVICE: self.service_name,
                **({META_EPOCH: str(epoch)} if epoch is not None else {})}

    def ping(self) -> None:
        """Raise NomadError unless Nomad answers (an outage's probe)."""
        self.client.leader()


def _meta(entry: QueueEntry) -> dict[str, str]:
    return {META_ENTRY: entry.id, META_ATTEMPT: str(entry.attempts), META_INSTANCE: entry.job_prefix}


def _is_ours(meta: Mapping[str, Any], entry: QueueEntry) -> bool:
    return all(str(meta.get(k, "")) == v for k, v in _meta(entry).items())
