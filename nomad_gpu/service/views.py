"""Read views for the API: inventory per node and the service's own status, built from the ledger."""

from __future__ import annotations

from typing import Any

from nomad_gpu.domain.inventory import Node
from nomad_gpu.domain.ledger import Ledger


def inventory_view(ledger: Ledger) -> list[dict[str, Any]]:
    return [node_view(node, ledger.node_free(node.id)) for node in ledger.inventory]


def node_view(node: Node, nf: Any) -> dict[str, Any]:
    free_gpus = nf.gpu_free if nf is not None else {}
    return {
        "id": node.id, "name": node.name, "datacenter": node.datacenter, "status": node.status.value,
        "schedulable": node.schedulable, "cpu_mhz": node.cpu_mhz, "memory_mb": node.memory_mb,
        "cpu_free": nf.cpu_free if nf is not None else 0, "memory_free": nf.mem_free if nf is not None else 0,
        "gpus": [{"id": g.id, "model": g.model, "mode": g.mode.value, "healthy": g.healthy,
                  "free_milli": free_gpus.get(g.id, 0)} for g in node.gpus],
        "migs": [{"id": m.id, "device": m.device_name, "healthy": m.healthy,
                  "free": nf is not None and m.id in nf.mig_free.get(m.device_name, [])} for m in node.migs],
    }


