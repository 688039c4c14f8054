"""Read views for the API: inventory per node and teams, built from the ledger as typed payloads
(`nomad_gpu.api.payloads`).

The inventory names, for every GPU and MIG instance, the entries that hold it (a shared GPU may
have several, each with its milli-GPU), so the dashboard can say who sits on a device, and groups MIG
instances by the physical GPU they are slices of (their shared PCI bus ID), so a GPU's layout can be
drawn. :func:`inventory_for` folds other teams' holders away for a team's caller, as the queue does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nomad_gpu.api.payloads import GpuView, Holder, MigGpu, MigRelayoutView, MigView, NodeView, TeamRow
from nomad_gpu.domain.cohorts import standings
from nomad_gpu.domain.fairshare import FairShareConfig
from nomad_gpu.domain.ids import InstanceId, Team
from nomad_gpu.domain.inventory import MigSlice, Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.topology import Topology
from nomad_gpu.domain.units import parent_slices_for_model
from nomad_gpu.service.admission.access import OTHER_TEAM, Caller
from nomad_gpu.service.loops.devicehealth import Spell
from nomad_gpu.service.relayout.controller import Record
from nomad_gpu.store import QueueEntry

if TYPE_CHECKING:
    from nomad_gpu.service.loops.scheduler import SchedulerService


def service_inventory(service: SchedulerService) -> list[dict[str, Any]]:
    """The scheduler's nodes as JSON, read under its lock, with its MIG re-layouts in flight and the
    unhealthy devices it has seen."""
    with service._lock:
        relayouts = service.relayout.controller.in_flight() if service.relayout is not None else []
        return inventory_view(service.ledger, relayouts, service.device_health.spells())


def inventory_view(ledger: Ledger, relayouts: Iterable[Record] = (),
                   unhealthy: Mapping[str, Spell] | None = None) -> list[dict[str, Any]]:
    """The nodes as JSON (what `service_inventory` answers), with the MIG re-layouts in flight
    and, for each unhealthy device, since when the service has seen it so (service/loops/devicehealth.py)."""
    return [n.to_json() for n in inventory_nodes(ledger, relayouts, unhealthy)]


def inventory_nodes(ledger: Ledger, relayouts: Iterable[Record] = (),
                    unhealthy: Mapping[str, Spell] | None = None) -> list[NodeView]:
    held = holders(ledger)
    by_gpu = {(r.node, r.gpu): r for r in relayouts if not r.phase.is_terminal()}
    return [node_view(node, ledger.node_free(node.id), held, by_gpu, unhealthy) for node in ledger.inventory]


def holders(ledger: Ledger) -> dict[str, list[Holder]]:
    """Instance ID -> who holds it (milli 1000 for a whole device)."""
    out: dict[str, list[Holder]] = {}
    for res in ledger.reservations():
        for p in res.placements:
            for i in p.instance_ids:
                out.setdefault(str(i), []).append(Holder(str(res.entry), str(res.team), p.share_milli or 1000))
    return out


def node_view(node: Node, nf: Any, held: Mapping[str, list[Holder]] | None = None,
              relayouts: Mapping[tuple[str, str], Record] | None = None,
              unhealthy: Mapping[str, Spell] | None = None) -> NodeView:
    free_gpus = nf.gpu_free if nf is not None else {}
    held = held or {}
    since = {iid: spell.since for iid, spell in (unhealthy or {}).items()}
    by_gpu: dict[str, list[Holder]] = {}
    for instance, owners in held.items():  # a share slot's holder is shown on its GPU
        gpu = nf.slot_gpu.get(instance, instance) if nf is not None else instance
        listed = by_gpu.setdefault(str(gpu), [])  # a share holds k slots of one GPU: name it once
        listed.extend(o for o in owners if o not in listed)
    migs = tuple(MigView(m.id, m.device_name, m.healthy, m.profile.name,
                         nf is not None and m.id in nf.mig_free.get(m.device_name, []),
                         tuple(held.get(str(m.id), [])), m.pci_bus_id, m.profile.compute_slices,
                         *_placed(m), m.health, since.get(str(m.id))) for m in node.migs)
    order = {g.id: k for k, g in enumerate(node.gpus)}  # groups and their GPUs in device order: a, a, b, b, ...
    groups = sorted((sorted(m, key=lambda i: order.get(i, len(order))) for m in
                     (node.topology.nvlink_groups() if node.topology is not None else [])),
                    key=lambda m: order.get(m[0], len(order)))
    group_of = {gpu: k for k, members in enumerate(groups) for gpu in members}
    return NodeView(
        id=node.id, name=node.name, datacenter=node.datacenter, status=node.status.value,
        schedulable=node.schedulable, cpu_mhz=node.cpu_mhz, memory_mb=node.memory_mb,
        cpu_free=nf.cpu_free if nf is not None else 0, memory_free=nf.mem_free if nf is not None else 0,
        draining=node.draining, eligible=node.eligible, node_pool=node.node_pool,
        gpus=tuple(GpuView(g.id, g.model, g.mode.value, g.healthy, free_gpus.get(g.id, 0),
                           tuple(by_gpu.get(str(g.id), [])), g.pci_bus_id, group_of.get(g.id),
                           _numa(node.topology, g.id), g.health, since.get(str(g.id))) for g in node.gpus),
        migs=migs, mig_gpus=_with_relayouts(str(node.id), mig_gpus(node.migs, migs), migs, relayouts or {}),
        topology=node.topology is not None, nvlink_groups=tuple(tuple(str(i) for i in m) for m in groups),
    )


def _numa(topology: Topology | None, gpu: InstanceId) -> int | None:
    place = topology.place(gpu) if topology is not None else None
    return place.numa if place is not None else None


def _placed(m: MigSlice) -> tuple[str | None, int | None, int | None]:
    p = m.placement
    return (p.gpu, p.start, p.size) if p is not None else (None, None, None)


def mig_gpus(slices: Iterable[MigSlice], views: Iterable[MigView]) -> tuple[MigGpu, ...]:
    """MIG instances grouped by the physical GPU they are slices of: its bus ID, which Nomad reports per
    instance (MIG instances share their parent's), or its UUID where the device plugin publishes placements.
    A placed GPU lists its instances by their first slice; instances with neither belong to no group."""
    grouped: dict[str, list[tuple[MigSlice, MigView]]] = {}
    for m, v in zip(slices, views, strict=True):
        key = m.pci_bus_id or (m.placement.gpu if m.placement is not None else None)
        if key:
            grouped.setdefault(key, []).append((m, v))
    out = []
    for members in grouped.values():
        model = members[0][0].model
        used = sum(m.profile.compute_slices for m, v in members if v.holders)
        free = sum(m.profile.compute_slices for m, v in members if v.free and v.healthy)
        uuid = next((m.placement.gpu for m, _ in members if m.placement is not None), None)
        if uuid is not None:
            members.sort(key=lambda mv: mv[0].placement.start if mv[0].placement is not None else 8)
        out.append(MigGpu(members[0][0].pci_bus_id or "", model, parent_slices_for_model(model), used, free,
                          tuple(m.id for m, _ in members), uuid))
    return tuple(out)


def _with_relayouts(node: str, gpus: tuple[MigGpu, ...], migs: Iterable[MigView],
                    relayouts: Mapping[tuple[str, str], Record]) -> tuple[MigGpu, ...]:
    """Each GPU with the re-layout in flight on it, if any: its target and the items it still has to create."""
    out = []
    for g in gpus:
        r = relayouts.get((node, g.uuid)) if g.uuid is not None else None
        if r is None:
            out.append(g)
            continue
        has = {f"{m.profile}@{m.start}" for m in migs if m.gpu == g.uuid}
        out.append(replace(g, relayout=relayout_view(r, has)))
    return tuple(out)


def relayout_view(r: Record, has: Iterable[str] = ()) -> MigRelayoutView:
    """A re-layout record as the inventory shows it; `has` is the GPU's layout now (`profile@start` items)."""
    layout = tuple(i for i in r.layout.split(",") if i)
    now = set(has)
    return MigRelayoutView(layout, tuple(i for i in layout if i not in now), r.expect_idle, r.phase.value,
                           r.started_at)


def with_utilisation(nodes: list[NodeView], utilisation: Mapping[str, float]) -> list[NodeView]:
    """Each node with the mean utilisation of its devices that report one (``utilisation``: device -> %,
    a shared GPU under its own ID); a device no running entry holds reports nothing and is not counted."""
    out = []
    for n in nodes:
        found = [utilisation[d] for d in [*(g.id for g in n.gpus), *(m.id for m in n.migs)] if d in utilisation]
        out.append(replace(n, gpu_util_pct=round(sum(found) / len(found), 1), gpu_util_devices=len(found))
                   if found else n)
    return out


def inventory_for(nodes: list[NodeView], caller: Caller) -> list[NodeView]:
    """The inventory as ``caller`` may see it: another team's holder is named neither by entry nor team."""
    if caller.admin:
        return nodes

    def fold(owners: Iterable[Holder]) -> tuple[Holder, ...]:
        return tuple(o if o.team == caller.team else replace(o, entry=OTHER_TEAM, team=OTHER_TEAM) for o in owners)

    return [replace(n, gpus=tuple(replace(g, holders=fold(g.holders)) for g in n.gpus),
                    migs=tuple(replace(m, holders=fold(m.holders)) for m in n.migs)) for n in nodes]


def teams_view(entries: Iterable[QueueEntry], usage: Mapping[Team, float], fair: FairShareConfig,
               capacity_gpu: float) -> list[TeamRow]:
    """Per team: GPU-equivalents in use, quota, weight, fair share and entries waiting or live.

    A team's fair share is the cluster's GPUs split by weight among the teams that want capacity
    now (something waiting or live), which is what fair-share ordering converges to under load.
    """
    counts: dict[str, dict[str, int]] = {}
    for e in entries:
        if not e.state.is_terminal():
            c = counts.setdefault(e.team, {"queued": 0, "live": 0})
            c["live" if e.state.holds_capacity() else "queued"] += 1
    names = sorted(set(counts) | {str(t) for t in usage} | {str(t) for t in fair.teams})
    active = [t for t in names if t in counts or usage.get(Team(t), 0.0) > 0]
    weights = sum(fair.team(Team(t)).weight for t in active)
    cohorts = standings(usage, fair, [Team(t) for t in names])
    out = []
    for t in names:
        policy = fair.team(Team(t))
        share = capacity_gpu * policy.weight / weights if t in active and weights else 0.0
        c = counts.get(t, {"queued": 0, "live": 0})
        standing = cohorts[Team(t)]
        out.append(TeamRow(t, round(float(usage.get(Team(t), 0.0)), 3), policy.quota_gpu, policy.weight,
                           round(share, 3), c["queued"], c["live"], round(standing.borrowed, 3),
                           round(standing.lent, 3), policy.cohort))
    return out


def teams_for(teams: list[TeamRow], caller: Caller) -> list[TeamRow]:
    """A team's caller sees its own row and one row summing every other team's use."""
    if caller.admin:
        return teams
    own = [t for t in teams if t.team == caller.team or t.team.startswith("_")]
    others = [t for t in teams if t not in own]
    if others:
        own.append(TeamRow(OTHER_TEAM, round(sum(t.in_use_gpu for t in others), 3), None, None,
                           round(sum(t.fair_share_gpu for t in others), 3), sum(t.queued for t in others),
                           sum(t.live for t in others)))
    return own


MIG_SLICES_PER_GPU = 7
"""Compute slices of a whole MIG-capable GPU: a MIG instance counts as its share of them."""


def capacity_gpu(ledger: Ledger) -> float:
    """The cluster's GPU-equivalents: every GPU, plus each MIG instance as its share of a GPU's compute."""
    total = 0.0
    for node in ledger.inventory:
        total += len(node.gpus) + sum(m.profile.compute_slices for m in node.migs) / MIG_SLICES_PER_GPU
    return total
