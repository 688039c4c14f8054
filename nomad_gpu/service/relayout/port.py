"""The re-layout controller's I/O against Nomad: register the apply job, read how it ended, read the node.

Also builds the planner's view of the cluster from Nomad itself: each opted-in node's MIG GPUs with
their placements (the project plugin's attributes) and which instances any live allocation holds
(ours and foreign), so a GPU is never re-laid under running work. Every call goes through
`NomadClient`, which has a timeout on every request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from nomad_gpu.domain.migplanner import MigGpu
from nomad_gpu.nomad.client import NomadClient, NomadJobExists, NomadNotFound
from nomad_gpu.nomad.decode import decode_alloc
from nomad_gpu.nomad.migdecode import busy_instances, decode_mig_placements, mig_gpus, relayout_opted_in
from nomad_gpu.service.life.fencing import FencedClient
from nomad_gpu.service.relayout.applyjob import ApplyJobSettings, apply_job_hcl
from nomad_gpu.service.relayout.controller import Record

logger = logging.getLogger(__name__)


class NomadRelayoutPort:
    def __init__(self, client: NomadClient, job: ApplyJobSettings | None = None) -> None:
        self.client = client
        self.job = job or ApplyJobSettings()

    def register_apply(self, record: Record) -> None:
        epoch = self.client.epoch() if isinstance(self.client, FencedClient) else None
        hcl = apply_job_hcl(record.job_id, record.node, record.gpu, record.layout, record.expect_idle, self.job,
                            epoch=epoch)
        try:
            self.client.register(self.client.parse(hcl), hcl, create_only=True, namespace=self.job.namespace)
        except NomadJobExists:  # registered before a lost reply or a restart: the same job, nothing to do
            logger.info("apply job %s already registered", record.job_id)

    def apply_status(self, record: Record) -> str | None:
        allocs = [decode_alloc(a) for a in self.client.job_allocations(record.job_id, namespace=self.job.namespace)]
        if not allocs:
            return None
        return max(allocs, key=lambda a: (a.create_time_ns, a.modify_index)).client_status.value

    def node_layout(self, node: str) -> tuple[str, dict[str, list[str]]] | None:
        try:
            raw = self.client.node(node)
        except NomadNotFound:
            return None
        layout: dict[str, list[str]] = {}
        for p in sorted(decode_mig_placements(raw).values(), key=lambda p: p.start):
            layout.setdefault(p.gpu, []).append(f"{p.profile}@{p.start}")
        return str(raw.get("Status") or ""), layout

    def stop(self, record: Record) -> None:
        try:
            self.client.deregister(record.job_id, purge=False, namespace=self.job.namespace)
        except NomadNotFound:
            pass


def opted_in_gpus(nodes: Iterable[Mapping[str, Any]], allocs: Iterable[Mapping[str, Any]], *,
                  extra_nodes: frozenset[str] = frozenset(), extra_gpus: frozenset[str] = frozenset()
                  ) -> list[MigGpu]:
    """The planner's GPUs from full node JSONs and the cluster's allocations. A node takes part when its
    meta opts in (`nomad_gpu_mig_relayout = "true"`) or the service config lists it (ID or name); a GPU
    when its node does or the config lists the GPU. Only ready, eligible nodes are offered."""
    busy = busy_instances(list(allocs))
    out: list[MigGpu] = []
    for raw in nodes:
        if raw.get("Status") != "ready" or raw.get("SchedulingEligibility", "eligible") != "eligible":
            continue
        node_in = relayout_opted_in(raw) or str(raw.get("ID")) in extra_nodes or str(raw.get("Name")) in extra_nodes
        for gpu in mig_gpus(raw, busy, opted_in=node_in):
            out.append(gpu if node_in or gpu.uuid not in extra_gpus else replace(gpu, opted_in=True))
    return out
