"""The node views of one scheduling pass, built only for the nodes the pass looks at.

A pass used to build a view of every node (and walk every live allocation) before placing anything,
and then score every node for every queued placement: on a 1,000-node cluster that was most of the
dev cluster's CPU per register, though the service pins each job to one node with a
`${node.unique.id}` constraint. Nomad's feasibility checks filter every other node out
(`scheduler/feasible/feasible.go`, v2.0.5), so for a pinned request the placement only ever depends
on the pinned node: it is tried alone first, and only when it does not fit is every node scored, so
that a refusal keeps the full `AllocMetric` counters (filtered, exhausted, evaluated) Nomad reports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from . import constraints
from .allocs import Alloc
from .inventory import Node
from .jobs import GroupAsk
from .placement import NodeView, Verdict, node_view, place
from .ports import AllocatedPort

_NODE_ID = "${node.unique.id}"


class PassViews:
    """Views of the nodes for one pass over the queue, made on first use from the live allocations
    on each node; a placement made during the pass is added to a view already made (a view made
    later sees it among the node's live allocations)."""

    def __init__(self, nodes: Mapping[str, Node], live_by_node: Mapping[str, Mapping[str, Alloc]]) -> None:
        self._nodes = nodes
        self._live = live_by_node
        self._views: dict[str, NodeView] = {}

    def view(self, node_id: str) -> NodeView:
        view = self._views.get(node_id)
        if view is None:
            allocs = self._live.get(node_id, {}).values()
            view = self._views[node_id] = node_view(self._nodes[node_id], allocs)
        return view

    def all(self) -> Iterator[NodeView]:
        """Every node's view, in the cluster's node order (the order placement breaks ties by)."""
        return (self.view(node_id) for node_id in self._nodes)

    def placed(self, node_id: str, ask: GroupAsk, instances: int, taken: tuple[AllocatedPort, ...] = ()) -> None:
        view = self._views.get(node_id)
        if view is not None:
            self._views[node_id] = view.plus(ask.cpu, ask.memory_mb, instances,
                                             (ask.namespace, ask.job_id, ask.group), taken)


def pinned_node(ask: GroupAsk) -> str | None:
    """The node ID a `${node.unique.id} = "<literal>"` constraint pins the group to, if any."""
    for constraint in ask.constraints:
        if (constraint.ltarget == _NODE_ID and constraint.operand in constraints.EQUAL
                and not constraint.rtarget.startswith("${")):
            return constraint.rtarget
    return None


def place_in_pass(ask: GroupAsk, views: PassViews, nodes: Mapping[str, Node],
                  is_free: Callable[[str], bool], *, short_offers: bool = False) -> Verdict:
    """`place` over every node, except that a pinned request that fits on its node is placed there
    without scoring the others (they would all be filtered by the pin)."""
    node_id = pinned_node(ask)
    if node_id is not None and node_id in nodes:
        verdict = place(ask, [views.view(node_id)], is_free, short_offers=short_offers)
        if verdict.placement is not None:
            return verdict
    return place(ask, list(views.all()), is_free, short_offers=short_offers)
