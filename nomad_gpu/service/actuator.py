"""Tells Nomad what the cycle decided: render HCL -> `/v1/jobs/parse` -> register with the source.

The Nomad job ID comes from the queue entry (and its attempt), so registering again after a crash
or a timeout updates the same job instead of starting a second copy (DESIGN 3.6).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from nomad_gpu.nomad.client import NomadClient, NomadNotFound
from nomad_gpu.render import META_ENTRY, JobRenderer, JobSpec, RenderPlacement
from nomad_gpu.store import QueueEntry

logger = logging.getLogger(__name__)

META_ATTEMPT = "nomad_gpu_attempt"


class Actuator:
    def __init__(self, client: NomadClient, templates_dir: Path | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.renderer = JobRenderer(templates_dir) if templates_dir is not None else JobRenderer()
        self.clock = clock

    def render(self, entry: QueueEntry, spec: JobSpec, placement: RenderPlacement) -> str:
        return self.renderer.render_job(spec, job_id=entry.nomad_job_id, placement=placement,
                                        extra_meta={META_ENTRY: entry.id, META_ATTEMPT: str(entry.attempts)})

    def submit(self, entry: QueueEntry, spec: JobSpec, placement: RenderPlacement) -> str:
        """Register the pinned job; returns the HCL that was sent. Raises NomadError / RenderError."""
        hcl = self.render(entry, spec, placement)
        job = self.client.parse(hcl)
        self.client.register(job, hcl)
        logger.info("registered %s for %s on node %s", entry.nomad_job_id, entry.id, placement.node_id)
        return hcl

    def stop(self, job_id: str, *, purge: bool = False) -> None:
        try:
            self.client.deregister(job_id, purge=purge)
        except NomadNotFound:
            pass
