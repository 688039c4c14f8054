"""Which device instances Nomad's fingerprints report unhealthy, and since when.

Nomad's fingerprint says only `Healthy` and `HealthDescription` per instance, never since when, and
leaves allocations already on an unhealthy device running (nomad/structs/devices.go, v2.0.5: it only
stops placing onto it). The operator needs both facts where they look: the inventory shows each
unhealthy device with the time the service first saw it so, and an entry that holds one carries a note,
so a job running on a GPU that fell off the bus is not mistaken for a healthy one. Kept by the
scheduler's lock; the time is the service's own clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nomad_gpu.domain.inventory import Node
from nomad_gpu.service.life.tracking import LIVE
from nomad_gpu.store import QueueEntry

if TYPE_CHECKING:
    from nomad_gpu.service.loops.scheduler import SchedulerService


@dataclass(frozen=True)
class Spell:
    since: float
    description: str


def unhealthy_instances(node: Node) -> dict[str, str]:
    """Instance ID -> description of every unhealthy instance on the node; a shared GPU's share slots
    count with it (a share placement names its slots)."""
    out: dict[str, str] = {}
    for g in node.gpus:
        if not g.healthy:
            for iid in (g.id, *g.share_ids):
                out[str(iid)] = g.health or "unhealthy"
    for m in node.migs:
        if not m.healthy:
            out[str(m.id)] = m.health or "unhealthy"
    return out


class DeviceHealth:
    def __init__(self) -> None:
        self._by_node: dict[str, dict[str, Spell]] = {}

    def observe(self, node: Node, now: float) -> None:
        """The node's latest fingerprint: a device still unhealthy keeps its first `since`."""
        old = self._by_node.get(str(node.id), {})
        self._by_node[str(node.id)] = {iid: old[iid] if iid in old else Spell(now, why)
                                       for iid, why in unhealthy_instances(node).items()}

    def forget(self, node_id: str) -> None:
        """The node was removed from Nomad: its devices are no one's concern now."""
        self._by_node.pop(node_id, None)

    def resync(self, nodes: Iterable[Node], now: float) -> None:
        """Nomad's whole picture: nodes gone are forgotten."""
        nodes = list(nodes)
        present = {str(n.id) for n in nodes}
        for gone in [k for k in self._by_node if k not in present]:
            del self._by_node[gone]
        for node in nodes:
            self.observe(node, now)

    def spells(self) -> dict[str, Spell]:
        return {iid: spell for spells in self._by_node.values() for iid, spell in spells.items()}

    def notes(self, placements: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
        """One note per unhealthy device among an entry's placements (stored JSON), in placement order."""
        spells = self.spells()
        out = []
        for p in placements:
            for iid in p.get("instance_ids") or ():
                spell = spells.get(str(iid))
                if spell is not None:
                    out.append(note(str(iid), spell))
        return tuple(out)


def note(instance_id: str, spell: Spell) -> str:
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(spell.since))
    return f"{instance_id} unhealthy since {at}" + (f": {spell.description}" if spell.description else "")


def entry_device_health(service: SchedulerService, entry: QueueEntry) -> tuple[str, ...]:
    """The notes of a live entry (admitted or running) on unhealthy devices; none for any other."""
    if entry.state not in LIVE:
        return ()
    with service._lock:
        return service.device_health.notes(entry.placements)
