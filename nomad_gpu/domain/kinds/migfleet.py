"""What a fleet at full size could ever offer a MIG ask: the MIG side of "could this job ever run?".

`domain/feasible.py` refuses a job no node could ever hold; for MIG that is not the instances a node
reports now but what a re-layout could make of its MIG-mode GPUs (DESIGN 15): every profile the
model's geometry supports (`miglayout.py`'s tables), as many as its GPUs hold. The ask reaches these
through `MigSlices.room_on` / `MigSlices.never_on`, so the feasibility check needs no branch on kinds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from nomad_gpu.domain.inventory import Node
from nomad_gpu.domain.miglayout import geometry_for
from nomad_gpu.domain.units import MigProfile

if TYPE_CHECKING:
    from nomad_gpu.domain.kinds.mig import MigSlices


def mig_parents(node: Node) -> dict[str, int]:
    """MIG-mode GPUs per model: the distinct parents of the node's instances (by PCI bus ID when the
    fingerprint says it, else the fewest 7-slice GPUs their compute slices need)."""
    buses: dict[str, set[str]] = {}
    slices: dict[str, int] = {}
    for m in node.migs:
        if m.pci_bus_id:
            buses.setdefault(m.model, set()).add(m.pci_bus_id)
        slices[m.model] = slices.get(m.model, 0) + m.profile.compute_slices
    return {model: len(buses.get(model, ())) or -(-used // 7) for model, used in slices.items()}


def profiles_of(model: str, node: Node) -> dict[str, int]:
    """Profile -> the most instances of it one GPU holds, for a MIG-mode model of ``node``: its MIG geometry
    (`miglayout.py`, the MIG user guide's tables), found from the model and the instances it reports; where
    no table fits, only the profiles it reports, as many as their compute slices allow on 7."""
    seen = [(m.profile.name, None) for m in node.migs if m.model == model]
    geometry = geometry_for(model, seen)
    if geometry is not None:
        return {shape.name: shape.max_count for shape in geometry.shapes}
    return {name: 1 if "+" in name else max(7 // max(MigProfile.parse(name).compute_slices, 1), 1)
            for name, _ in seen}


def mig_room(g: MigSlices, node: Node) -> dict[str, int]:
    """Instances of the profile a node could offer per model: those reported now, or a re-layout's most."""
    room: dict[str, int] = {}
    for m in node.migs:
        if m.profile.name == g.profile and g.allows(m.model):
            room[m.model] = room.get(m.model, 0) + 1
    for model, parents in mig_parents(node).items():
        if g.allows(model):
            most = parents * profiles_of(model, node).get(g.profile, 0)
            if most > room.get(model, 0):
                room[model] = most
    return {model: n for model, n in room.items() if n > 0}


def mig_nearest(g: MigSlices, scope: Sequence[Node]) -> str | None:
    """Why no node of ``scope`` could ever hold ``g`` alone, with the profiles offered; None if one could."""
    offered: set[str] = {m.profile.name for n in scope for m in n.migs}
    for n in scope:
        for model in mig_parents(n):
            offered |= set(profiles_of(model, n))
    if not offered:
        return f"MIG {g.profile} asked for; no GPU here is in MIG mode"
    most = max((max(mig_room(g, n).values(), default=0) for n in scope), default=0)
    if most == 0:
        return f"no MIG profile {g.profile}; MIG profiles here: {', '.join(sorted(offered, key=_profile_key))}"
    if most < g.count:
        return f"{g.count} x MIG {g.profile} on one node asked for; at most {most} on one node here"
    return None


def _profile_key(name: str) -> tuple[int, int, str]:
    g, _, rest = name.partition("g.")
    mem = rest.split("gb", 1)[0]
    return (int(g) if g.isdigit() else 99, int(mem) if mem.isdigit() else 0, name)
