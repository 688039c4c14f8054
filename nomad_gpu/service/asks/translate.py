"""Between the user's job spec and the core: spec -> JobRequest, placements -> RenderPlacement.

Kept apart from both sides so that neither the pure core nor the render layer needs to know the
other's types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nomad_gpu.api.payloads import Placement
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.kinds import kind_of
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.requests import AllocAsk, GpuAsk, JobRequest
from nomad_gpu.render import GroupPlacement, GroupSpec, JobSpec, RenderPlacement, parse_spec
from nomad_gpu.render.devices import Placed, device_adapter
from nomad_gpu.render.speckinds import spec_kind
from nomad_gpu.service.asks.classes import ClassBook
from nomad_gpu.service.asks.kindasks import ask_for
from nomad_gpu.store import QueueEntry


def check_supported(spec: JobSpec) -> None:
    """What the service cannot pin yet fails at submission, with the reason, not later."""
    for group in spec.groups:
        if spec.chooses_kind(group) and group.count > 1:  # one device block per group: one choice for all
            raise InvalidRequest(f"groups[{group.name}]: a group whose class chooses the GPU kind must have count 1 "
                                 "(each instance could get another kind); split it, or give gpu:, mig: or share:")
        if group.share is not None and group.count > 1:
            raise InvalidRequest(f"groups[{group.name}]: a time-slice share group must have count 1 "
                                 "(each instance would need its own shared GPU)")


def job_request(entry: QueueEntry, spec: JobSpec, classes: ClassBook | None = None) -> JobRequest:
    """`classes`: the policy and fleet facts a group whose class chooses its kind is asked by (its tiers)."""
    asks: list[AllocAsk] = []
    for group in spec.groups:
        gpu: GpuAsk | None = None
        tiers: tuple[tuple[GpuAsk, ...], ...] = ()
        if spec.chooses_kind(group):
            if classes is None:
                raise InvalidRequest(f"groups[{group.name}]: its class chooses the GPU kind; no class policy here")
            gpu, tiers = classes.gpu_ask(spec, group)
        elif (field := group.capacity_kind) is not None:  # the kind's field: its ask (service/asks/kindasks.py)
            gpu = ask_for(spec_kind(field).kind, group.kind_value(field), group.gpu_memory_bytes)
        for i in range(group.count):
            asks.append(AllocAsk(group.name, i, group.resources.cpu, group.resources.memory, gpu, tiers))
    return JobRequest(
        entry=EntryId(entry.id), team=Team(entry.team), asks=tuple(asks), priority=entry.priority,
        submitted_at=entry.submitted_at, datacenters=frozenset(spec.datacenters),
        node_pool=spec.node_pool or "default",  # bound at submit; older entries: Nomad's `default` (nodepools.py)
        one_node=True, drivers=frozenset(group.task.driver for group in spec.groups),
        preemptible=classes is not None and classes.preemptible(spec),
    )


def render_placement(spec: JobSpec, placements: Sequence[AllocPlacement],
                     node_pool: str | None = None, vendor: str = "nvidia") -> RenderPlacement:
    """`vendor` is the fingerprint's (the chosen devices' `Vendor`): the device block names it, never an
    assumed `nvidia`."""
    nodes = {p.node for p in placements}
    if len(nodes) != 1:
        raise InvalidRequest(f"a job is pinned to one node; the placement spans {sorted(nodes)}")
    groups: list[GroupPlacement] = []
    for group in spec.groups:
        mine = sorted((p for p in placements if p.group == group.name), key=lambda p: p.index)
        adapter = device_adapter(_placed_kind(group, mine))
        placed = [Placed(tuple(p.instance_ids), p.device_name, p.share_gpu, p.share_milli) for p in mine]
        groups.append(adapter.group_placement(group.name, placed, vendor))
    return RenderPlacement(node_id=next(iter(nodes)), groups=tuple(groups), node_pool=node_pool)


def _placed_kind(group: GroupSpec, mine: Sequence[AllocPlacement]) -> str:
    """The core's kind name of a group's placements: the one its own kind field asks for (a placement read
    back from storage does not name its kind), else the one placed (a class chose it)."""
    if not mine:
        return "none"
    if (field := group.capacity_kind) is not None:
        return spec_kind(field).kind
    kind = kind_of(mine[0])
    return kind.name if kind is not None else "none"


def placement_json(p: AllocPlacement, choice: str | None = None) -> dict[str, Any]:
    """The stored (and sent: an entry's `placements`) form of a placement, `nomad_gpu.api.payloads.Placement`;
    `choice`: what a workload class chose and why (`ClassBook.choice`), stored with the attempt."""
    return Placement(group=p.group, index=p.index, node=p.node, cpu_mhz=p.cpu_mhz, memory_mb=p.memory_mb,
                     instance_ids=tuple(p.instance_ids), device_name=p.device_name, share_milli=p.share_milli,
                     gpu_equivalents=p.gpu_equivalents, share_gpu=p.share_gpu,
                     link=p.link.label if p.link is not None else None, choice=choice).to_json()


def placement_from_json(d: Mapping[str, Any]) -> AllocPlacement:
    return AllocPlacement(
        group=str(d["group"]), index=int(d["index"]), node=NodeId(str(d["node"])), cpu_mhz=int(d["cpu_mhz"]),
        memory_mb=int(d["memory_mb"]), instance_ids=tuple(InstanceId(str(i)) for i in d["instance_ids"]),
        device_name=d.get("device_name"), share_milli=int(d.get("share_milli") or 0),
        gpu_equivalents=float(d.get("gpu_equivalents") or 0.0),
        share_gpu=InstanceId(str(d["share_gpu"])) if d.get("share_gpu") else None,
    )


def spec_of(entry: QueueEntry) -> JobSpec:
    """The stored spec, validated again (a newer validator may refuse it: SpecError / InvalidRequest)."""
    spec = parse_spec(dict(entry.spec))
    if not isinstance(spec, JobSpec):
        raise InvalidRequest(f"entry {entry.id} does not hold a job spec")
    return spec
