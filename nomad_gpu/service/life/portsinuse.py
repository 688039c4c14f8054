"""Static host ports as something placement respects: a job asking for port 9100 is not admitted onto a
node where a live allocation (ours or anyone's) already holds 9100.

Nomad refuses such a placement itself (`network: reserved port collision <label>=<port>`,
`NetworkIndex.AssignPorts` in nomad/structs/network.go and `BinPackIterator` in
scheduler/feasible/rank.go, v2.0.5); the life cycle then re-queues the entry away from that node
(`Lifecycle.on_eval`). Knowing the ports in use beforehand saves that round trip: each cycle, the nodes
where one of a queued entry's static ports is taken are left out of its candidates, like the nodes that
refused it. Two entries admitted in the same cycle onto the same free port are still possible; Nomad
refuses the second and it is re-queued.
"""

from __future__ import annotations

from collections.abc import Iterable

from nomad_gpu.domain.ids import NodeId
from nomad_gpu.nomad.decode import AllocInfo
from nomad_gpu.render import JobSpec, SweepSpec

__all__ = ["blocked_nodes", "port_note", "ports_taken", "static_ports"]


def static_ports(spec: JobSpec | SweepSpec | None) -> frozenset[int]:
    """The fixed host ports a job asks for (every group is placed on its one node)."""
    if spec is None:
        return frozenset()
    return frozenset(p.static for g in spec.groups for p in g.ports.values() if p.static is not None)


def ports_taken(allocs: Iterable[AllocInfo],
                pending: Iterable[tuple[str, frozenset[int]]] = ()) -> dict[NodeId, set[int]]:
    """Node -> the host ports its live allocations hold, plus `pending`: (node, static ports) of jobs
    admitted and registered whose allocations Nomad has not reported yet."""
    taken: dict[NodeId, set[int]] = {}
    for alloc in allocs:
        if not alloc.is_terminal:
            taken.setdefault(alloc.node_id, set()).update(p.value for p in alloc.ports)
    for node, ports in pending:
        taken.setdefault(NodeId(node), set()).update(ports)
    return taken


def blocked_nodes(wanted: frozenset[int], taken: dict[NodeId, set[int]]) -> frozenset[NodeId]:
    """The nodes where one of `wanted` is in use."""
    return frozenset(node for node, used in taken.items() if used & wanted)


def port_note(wanted: frozenset[int], taken: dict[NodeId, set[int]], blocked: frozenset[NodeId],
              names: dict[NodeId, str]) -> str:
    """Why the blocked nodes are left out, for the entry's reason: `static port 9100 in use on gpu-1`."""
    ports = sorted(wanted & {p for node in blocked for p in taken.get(node, ())})
    where = sorted(names.get(node) or node for node in blocked)
    shown = ", ".join(where[:3]) + (f" and {len(where) - 3} more" if len(where) > 3 else "")
    word = "port" if len(ports) == 1 else "ports"
    return f"static {word} {', '.join(map(str, ports))} in use on {shown}"
