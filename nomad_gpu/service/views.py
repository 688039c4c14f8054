"""Read views for the API: inventory per node and the service's own status, built from the ledger.

The inventory names, for every GPU and MIG instance, the entries that hold it (a shared GPU may
have several, each with its milli-GPU), so the dashboard can say who sits on a device.
:func:`inventory_for` folds other teams' holders away for a team's caller, as the queue does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nomad_gpu.domain.fairshare import FairShareConfig
from nomad_gpu.domain.ids import Team
from nomad_gpu.domain.inventory import Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.service.access import OTHER_TEAM, Caller
from nomad_gpu.store import QueueEntry


def inventory_view(ledger: Ledger) -> list[dict[str, Any]]:
    held = holders(ledger)
    return [node_view(node, ledger.node_free(node.id), held) for node in ledger.inventory]


def holders(ledger: Ledger) -> dict[str, list[dict[str, Any]]]:
    """Instance ID -> who holds it: ``{"entry", "team", "milli"}`` (milli 1000 for a whole device)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for res in ledger.reservations():
        for p in res.placements:
            for i in p.instance_ids:
                out.setdefault(str(i), []).append({"entry": str(res.entry), "team": str(res.team),
                                                   "milli": p.share_milli or 1000})
    return out


def node_view(node: Node, nf: Any, held: Mapping[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    free_gpus = nf.gpu_free if nf is not None else {}
    held = held or {}
    by_gpu: dict[str, list[dict[str, Any]]] = {}
    for instance, owners in held.items():  # a share slot's holder is shown on its GPU
        gpu = nf.slot_gpu.get(instance, instance) if nf is not None else instance
        listed = by_gpu.setdefault(str(gpu), [])  # a share holds k slots of one GPU: name it once
        listed.extend(o for o in owners if o not in listed)
    return {
        "id": node.id, "name": node.name, "datacenter": node.datacenter, "status": node.status.value,
        "schedulable": node.schedulable, "cpu_mhz": node.cpu_mhz, "memory_mb": node.memory_mb,
        "cpu_free": nf.cpu_free if nf is not None else 0, "memory_free": nf.mem_free if nf is not None else 0,
        "draining": node.draining, "eligible": node.eligible, "node_pool": node.node_pool,
        "gpus": [{"id": g.id, "model": g.model, "mode": g.mode.value, "healthy": g.healthy,
                  "free_milli": free_gpus.get(g.id, 0), "holders": by_gpu.get(str(g.id), [])} for g in node.gpus],
        "migs": [{"id": m.id, "device": m.device_name, "healthy": m.healthy, "profile": m.profile.name,
                  "free": nf is not None and m.id in nf.mig_free.get(m.device_name, []),
                  "holders": list(held.get(str(m.id), []))} for m in node.migs],
    }


def inventory_for(nodes: list[dict[str, Any]], caller: Caller) -> list[dict[str, Any]]:
    """The inventory as ``caller`` may see it: another team's holder is named neither by entry nor team."""
    if caller.admin:
        return nodes

    def fold(owners: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [dict(o) if o.get("team") == caller.team else {**o, "entry": OTHER_TEAM, "team": OTHER_TEAM}
                for o in owners]

    return [{**n, "gpus": [{**g, "holders": fold(g.get("holders", []))} for g in n["gpus"]],
             "migs": [{**m, "holders": fold(m.get("holders", []))} for m in n["migs"]]} for n in nodes]


def teams_view(entries: Iterable[QueueEntry], usage: Mapping[Team, float], fair: FairShareConfig,
               capacity_gpu: float) -> list[dict[str, Any]]:
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
    out = []
    for t in names:
        policy = fair.team(Team(t))
        share = capacity_gpu * policy.weight / weights if t in active and weights else 0.0
        c = counts.get(t, {"queued": 0, "live": 0})
        out.append({"team": t, "in_use_gpu": round(float(usage.get(Team(t), 0.0)), 3), "quota_gpu": policy.quota_gpu,
                    "weight": policy.weight, "fair_share_gpu": round(share, 3), "queued": c["queued"],
                    "live": c["live"]})
    return out


def teams_for(teams: list[dict[str, Any]], caller: Caller) -> list[dict[str, Any]]:
    """A team's caller sees its own row and one row summing every other team's use."""
    if caller.admin:
        return teams
    own = [t for t in teams if t["team"] == caller.team or t["team"].startswith("_")]
    others = [t for t in teams if t not in own]
    if others:
        own.append({"team": OTHER_TEAM, "in_use_gpu": round(sum(t["in_use_gpu"] for t in others), 3),
                    "quota_gpu": None, "weight": None,
                    "fair_share_gpu": round(sum(t["fair_share_gpu"] for t in others), 3),
                    "queued": sum(t["queued"] for t in others), "live": sum(t["live"] for t in others)})
    return own


MIG_SLICES_PER_GPU = 7
"""Compute slices of a whole MIG-capable GPU: a MIG instance counts as its share of them."""


def capacity_gpu(ledger: Ledger) -> float:
    """The cluster's GPU-equivalents: every GPU, plus each MIG instance as its share of a GPU's compute."""
    total = 0.0
    for node in ledger.inventory:
        total += len(node.gpus) + sum(m.profile.compute_slices for m in node.migs) / MIG_SLICES_PER_GPU
    return total
