"""The ledger: which entry holds which instances, CPU and memory, and the free capacity that remains.

Capacity moves only through `reserve` and `release`, and both check the books: committing an
instance, a share or CPU twice raises `LedgerConflict` instead of happening. The free-capacity
index (`FreeIndex`) is updated on every move, so a released GPU is free in the very next cycle.

Reservation states follow `TRANSITIONS`; `_move` is the only place that changes them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from nomad_gpu.domain.errors import LedgerConflict, UnknownEntry
from nomad_gpu.domain.freeindex import FreeIndex, NodeFree
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Inventory, Node
from nomad_gpu.domain.placement import AllocPlacement


class ReservationState(enum.Enum):
    RESERVED = "reserved"
    """Decided by a cycle; not yet seen placed by Nomad."""
    CONFIRMED = "confirmed"
    """Nomad placed it on the instances we chose."""
    RELEASED = "released"

    def is_terminal(self) -> bool:
        return self is ReservationState.RELEASED


TRANSITIONS: Mapping[ReservationState, frozenset[ReservationState]] = {
    ReservationState.RESERVED: frozenset({ReservationState.CONFIRMED, ReservationState.RELEASED}),
    ReservationState.CONFIRMED: frozenset({ReservationState.RELEASED}),
    ReservationState.RELEASED: frozenset(),
}


@dataclass(frozen=True)
class Reservation:
    entry: EntryId
    team: Team
    placements: tuple[AllocPlacement, ...]
    state: ReservationState = ReservationState.RESERVED

    @property
    def gpu_equivalents(self) -> float:
        return sum(p.gpu_equivalents for p in self.placements)


class Ledger:
    """Books of committed capacity over an inventory. Deterministic: no clock, no randomness."""

    def __init__(self, inventory: Inventory | None = None) -> None:
        self._nodes: dict[NodeId, Node] = dict((inventory or Inventory()).nodes)
        self._inventory: Inventory | None = None
        self.index = FreeIndex()
        self._held: dict[EntryId, Reservation] = {}
        self._by_node: dict[NodeId, set[EntryId]] = {}
        self._team_use: dict[Team, float] = {}
        for node in self.inventory:  # the inventory's id order: the index's default node priority
            self.index.put(NodeFree.of(node, ()))

    # ---- reads -------------------------------------------------------------------------------
    @property
    def inventory(self) -> Inventory:
        """All nodes in id order (rebuilt lazily: a resync of 10,000 nodes must not be quadratic)."""
        if self._inventory is None:
            self._inventory = Inventory.of(self._nodes.values())
        return self._inventory

    def __contains__(self, entry: object) -> bool:
        return entry in self._held

    def get(self, entry: EntryId) -> Reservation:
        try:
            return self._held[entry]
        except KeyError:
            raise UnknownEntry(entry) from None

    def reservations(self) -> Iterator[Reservation]:
        return iter(self._held.values())

    def team_usage(self) -> Mapping[Team, float]:
        """GPU-equivalents held right now, per team."""
        return self._team_use

    def entries_on(self, node: NodeId) -> frozenset[EntryId]:
        return frozenset(self._by_node.get(node, ()))

    def node_free(self, node: NodeId) -> NodeFree | None:
        return self.index.get(node)

    # ---- moves -------------------------------------------------------------------------------
    def reserve(self, entry: EntryId, team: Team, placements: Iterable[AllocPlacement], *,
                reported: bool = False) -> Reservation:
        """Commit capacity for an entry, all of it or none (gang). Raises LedgerConflict. `reported`: what
        Nomad already runs (or was told to), booked even on a device now unhealthy (freeindex.py)."""
        placements = tuple(placements)
        if entry in self._held:
            raise LedgerConflict(f"{entry} already holds capacity")
        staged: dict[NodeId, NodeFree] = {}
        for p in placements:
            nf = staged.get(p.node) or self.index.get(p.node)
            if nf is None:
                raise LedgerConflict(f"{entry}: node {p.node} is not in the inventory")
            staged[p.node] = nf.take(p, reported=reported)  # raises LedgerConflict on any double commit
        for nf in staged.values():
            self.index.put(nf)
        res = Reservation(entry, team, placements)
        self._held[entry] = res
        for p in placements:
            self._by_node.setdefault(p.node, set()).add(entry)
        self._team_use[team] = self._team_use.get(team, 0.0) + res.gpu_equivalents
        return res

    def confirm(self, entry: EntryId) -> Reservation:
        res = self.get(entry)
        if res.state is ReservationState.CONFIRMED:
            return res
        return self._move(res, ReservationState.CONFIRMED)

    def release(self, entry: EntryId) -> Reservation | None:
        """Give back everything an entry holds. Releasing twice is a no-op (events repeat)."""
        res = self._held.pop(entry, None)
        if res is None:
            return None
        for node_id in sorted({p.node for p in res.placements}):
            owners = self._by_node.get(node_id)
            if owners is not None:
                owners.discard(entry)
                if not owners:
                    del self._by_node[node_id]
            self._rebuild_node(node_id)
        left = self._team_use.get(res.team, 0.0) - res.gpu_equivalents
        if left <= 1e-9:
            self._team_use.pop(res.team, None)
        else:
            self._team_use[res.team] = left
        return self._move(res, ReservationState.RELEASED, store=False)

    def set_node(self, node: Node) -> None:
        """A node appeared or changed (status, drain, health, devices): recompute what it offers."""
        self._nodes[node.id] = node
        self._inventory = None
        self._rebuild_node(node.id)

    def remove_node(self, node_id: NodeId) -> None:
        self._nodes.pop(node_id, None)
        self._inventory = None
        self.index.drop(node_id)

    # ---- internals ---------------------------------------------------------------------------
    def _move(self, res: Reservation, to: ReservationState, *, store: bool = True) -> Reservation:
        if to not in TRANSITIONS[res.state]:
            raise LedgerConflict(f"{res.entry}: {res.state.value} -> {to.value} is not allowed")
        moved = replace(res, state=to)
        if store:
            self._held[res.entry] = moved
        return moved

    def _rebuild_node(self, node_id: NodeId) -> None:
        node = self._nodes.get(node_id)
        if node is None:
            self.index.drop(node_id)
            return
        held = [p for e in sorted(self._by_node.get(node_id, ())) for p in self._held[e].placements
                if p.node == node_id]
        self.index.put(NodeFree.of(node, held))


def instance_owner(ledger: Ledger) -> dict[InstanceId, EntryId]:
    """Every committed instance and its holder (shares may have several; the last one wins here)."""
    out: dict[InstanceId, EntryId] = {}
    for res in ledger.reservations():
        for p in res.placements:
            for i in p.instance_ids:
                out[i] = res.entry
    return out
