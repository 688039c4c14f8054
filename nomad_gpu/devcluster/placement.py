"""Where one allocation of a task group goes: a simple, deterministic stand-in for Nomad's scheduler.

Pure functions over a snapshot (node views and a "is this instance free" predicate); the cluster
state commits the result. It follows the Nomad rules our service depends on, and nothing more:

- only ready, eligible nodes of the job's node pool and datacenters are evaluated; drivers, job, group
  and task constraints then filter them exactly as Nomad does (constraints.py: an unknown target is
  not found, an unknown operator filters), and resource shortfalls exhaust them, counted as Nomad's
  `AllocMetric` for `FailedTGAllocs`;
- a device request is filled from ONE device group (reference section 7), matched by
  `gpu` | `<vendor>/<type>` | `<vendor>/<type>/<exact Name>`;
- a `${device.ids}` constraint (`set_contains_any`/`set_contains`) also limits which instances may be
  assigned (reference section 7, #18141), which is how the service pins GPUs;
- CPU and memory must fit; among feasible nodes the fullest wins (binpacking).

A request that could only be met with an instance a live allocation holds is never placed; the
verdict says so (`pinned_held`) so that the audit can count the refused double-booking.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from . import constraints, ports
from .inventory import DeviceGroup, Node
from .jobs import Constraint, DeviceAsk, GroupAsk, TaskAsk
from .ports import AllocatedPort
from .units import compare_quantities

logger = logging.getLogger(__name__)

FILTER_DRIVERS = "missing drivers"  # `scheduler/feasible/feasible.go`, v2.0.5
FILTER_HOST_VOLUMES = "missing compatible host volumes"  # HostVolumeChecker, `scheduler/feasible/feasible.go`, v2.0.5
_warned: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class NodeView:
    """A node plus what its live allocations use right now."""

    node: Node
    used_cpu: int
    used_memory: int
    held_instances: int
    jobs: frozenset[tuple[str, str, str]] = frozenset()  # (namespace, job, group) of live allocations
    used_ports: frozenset[int] = frozenset()  # host ports its live allocations hold (ports.py)

    def plus(self, cpu: int, memory_mb: int, instances: int, job: tuple[str, str, str] | None = None,
             taken: tuple[AllocatedPort, ...] = ()) -> NodeView:
        return NodeView(self.node, self.used_cpu + cpu, self.used_memory + memory_mb,
                        self.held_instances + instances, self.jobs | {job} if job else self.jobs,
                        self.used_ports | {port.value for port in taken})


class _Usage(Protocol):
    """What a live allocation uses (the cluster state's Alloc satisfies it)."""

    @property
    def tasks(self) -> tuple[TaskAsk, ...]: ...

    @property
    def device_ids(self) -> list[str]: ...

    @property
    def namespace(self) -> str: ...

    @property
    def job_id(self) -> str: ...

    @property
    def task_group(self) -> str: ...

    @property
    def ports(self) -> tuple[AllocatedPort, ...]: ...


def node_view(node: Node, live: Iterable[_Usage]) -> NodeView:
    """A node with the CPU, memory and device instances its live allocations use."""
    cpu = memory = instances = 0
    jobs = set()
    for alloc in live:
        cpu += sum(task.cpu for task in alloc.tasks)
        memory += sum(task.memory_mb for task in alloc.tasks)
        instances += len(alloc.device_ids)
        jobs.add((alloc.namespace, alloc.job_id, alloc.task_group))
    return NodeView(node, cpu, memory, instances, frozenset(jobs), ports.used_ports(live))


@dataclass(frozen=True)
class DeviceChoice:
    task: str
    group: DeviceGroup
    ids: tuple[str, ...]


@dataclass(frozen=True)
class Placement:
    node: Node
    devices: tuple[DeviceChoice, ...]
    ports: tuple[AllocatedPort, ...] = ()


@dataclass
class Verdict:
    """The chosen placement, or why there is none (reason -> number of nodes it ruled out).

    Besides the flat `reasons`, the counters of Nomad's `AllocMetric` are kept apart: nodes outside
    the job's datacenters and pool, or not ready, are never evaluated (`readyNodesInDCsAndPool`,
    `scheduler/util.go` v2.0.5); feasibility checks *filter* an evaluated node (`ConstraintFiltered`,
    `scheduler/feasible/feasible.go`), resource shortfalls *exhaust* it (`DimensionExhausted`,
    `scheduler/feasible/rank.go`)."""

    placement: Placement | None = None
    reasons: dict[str, int] = field(default_factory=dict)
    pinned_held: bool = False
    evaluated: int = 0
    in_pool: int = 0
    available: dict[str, int] = field(default_factory=dict)
    filtered: dict[str, int] = field(default_factory=dict)
    exhausted: dict[str, int] = field(default_factory=dict)

    def rule_out(self, reason: str) -> None:
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def filter_out(self, reason: str, *, constraint: bool = False) -> None:
        self.rule_out(f"constraint {reason}" if constraint else reason)
        self.filtered[reason] = self.filtered.get(reason, 0) + 1

    def exhaust(self, dimension: str) -> None:
        self.rule_out(f"resources exhausted: {dimension}" if dimension in ("cpu", "memory") else dimension)
        self.exhausted[dimension] = self.exhausted.get(dimension, 0) + 1


def place(ask: GroupAsk, nodes: Sequence[NodeView], is_free: Callable[[str], bool], *,
          short_offers: bool = False) -> Verdict:
    """Choose a node and device instances for one allocation of `ask`; `short_offers`: as Nomad before
    1.11.1 did (`_choose_group`)."""
    verdict = Verdict()
    best: tuple[float, int, Placement] | None = None
    for position, view in enumerate(nodes):
        node = view.node
        if ask.node_pool in ("all", node.node_pool):
            verdict.in_pool += 1
        reason = _out_of_scope(ask, node)
        if reason is not None:
            verdict.rule_out(reason)
            continue
        verdict.evaluated += 1
        verdict.available[node.datacenter] = verdict.available.get(node.datacenter, 0) + 1
        reason = _infeasible(ask, node, view.jobs)
        if reason is not None:
            verdict.filter_out(reason, constraint=reason not in (FILTER_DRIVERS, constraints.DISTINCT_HOSTS))
            continue
        offer: tuple[AllocatedPort, ...] = ()
        if ask.network is not None:  # the group network comes before the tasks' devices (rank.go)
            assigned = ports.assign(ask.network, view.used_ports, node.address)
            if isinstance(assigned, str):
                verdict.exhaust(f"network: {assigned}")
                continue
            offer = assigned
        devices = _assign_devices(ask, node, is_free, verdict, short_offers)
        if devices is None:
            continue
        if view.used_cpu + ask.cpu > node.usable_cpu:
            verdict.exhaust("cpu")
            continue
        if view.used_memory + ask.memory_mb > node.usable_memory:
            verdict.exhaust("memory")
            continue
        score = _fill_score(ask, view, sum(len(choice.ids) for choice in devices))
        if best is None or score > best[0]:
            best = (score, position, Placement(node, devices, offer))
    if best is not None:
        verdict.placement = best[2]
        verdict.pinned_held = False
    return verdict


def _out_of_scope(ask: GroupAsk, node: Node) -> str | None:
    """Why the scheduler does not even look at this node (`scheduler/util.go` readyNodesInDCsAndPool)."""
    if node.status != "ready":
        return f"node {node.status}"
    if node.eligibility != "eligible":
        return "node ineligible"
    if not any(glob_match(pattern, node.datacenter) for pattern in ask.datacenters):
        return "missing compatible datacenter"
    if ask.node_pool not in ("all", node.node_pool):
        return "node pool mismatch"
    return None


def glob_match(pattern: str, text: str) -> bool:
    """Datacenter globbing as Nomad does it (`Node.IsInAnyDC`, `nomad/structs/structs.go` v2.0.5,
    with ryanuber/go-glob): `*` matches any run of characters; nothing else is special."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern == text
    if not text.startswith(parts[0]):
        return False
    position = len(parts[0])
    for middle in parts[1:-1]:
        found = text.find(middle, position)
        if found < 0:
            return False
        position = found + len(middle)
    return len(text) - position >= len(parts[-1]) and text.endswith(parts[-1])


def _infeasible(ask: GroupAsk, node: Node, jobs_here: frozenset[tuple[str, str, str]]) -> str | None:
    """Why feasibility checks filter the node out (`scheduler/feasible/feasible.go`, v2.0.5):
    drivers first, then host volumes, then constraints (job, group and task), then `distinct_hosts`."""
    if not all(node.drivers.get(task.driver, False) for task in ask.tasks):
        return FILTER_DRIVERS
    if not set(ask.host_volumes) <= set(node.host_volumes):
        return FILTER_HOST_VOLUMES
    resolve = constraints.literal_or(lambda target: _node_target(target, node))
    for position, constraint in enumerate(ask.constraints):
        if constraint.operand == constraints.DISTINCT_HOSTS:
            group = "*" if position < ask.job_constraints else ask.group
            if any((ns, job) == (ask.namespace, ask.job_id) and group in ("*", g) for ns, job, g in jobs_here):
                return constraints.DISTINCT_HOSTS
            continue
        if constraint.operand == constraints.DISTINCT_PROPERTY:
            _warn_once(constraint.ltarget, constraint.operand)
            continue
        left, left_found = resolve(constraint.ltarget)
        right, right_found = resolve(constraint.rtarget)
        if not constraints.holds(constraint.operand, left, right, left_found, right_found):
            return f"{constraint.ltarget} {constraint.operand} {constraint.rtarget}"
    return None


def _node_target(target: str, node: Node) -> tuple[str, bool]:
    """`resolveTarget` (`scheduler/feasible/feasible.go`, v2.0.5): an unknown target is not found."""
    simple = {
        "${node.unique.id}": node.id,
        "${node.unique.name}": node.name,
        "${node.datacenter}": node.datacenter,
        "${node.class}": node.node_class,
        "${node.pool}": node.node_pool,
    }
    if target in simple:
        return simple[target], True
    if target.startswith("${meta.") and target.endswith("}"):
        value = node.meta.get(target[7:-1])
    elif target.startswith("${attr.") and target.endswith("}"):
        value = node.attributes().get(target[7:-1])
    else:
        value = None
    return ("", False) if value is None else (value, True)


def _warn_once(target: str, operand: str) -> None:
    if (target, operand) not in _warned:
        _warned.add((target, operand))
        logger.warning("dev cluster does not model constraint %s %s; it passes", target, operand)


def _assign_devices(ask: GroupAsk, node: Node, is_free: Callable[[str], bool],
                    verdict: Verdict, short_offers: bool = False) -> tuple[DeviceChoice, ...] | None:
    chosen: list[DeviceChoice] = []
    taken: set[str] = set()
    for task in ask.tasks:
        for request in task.devices:
            result = _choose_group(request, node, lambda i: is_free(i) and i not in taken, short_offers)
            if isinstance(result, str):
                if result == _PINNED_HELD:  # the pinned instances exist but a live allocation holds them
                    verdict.pinned_held, result = True, NO_MATCH
                if result == "missing devices":  # no group can ever serve it: a feasibility filter
                    verdict.filter_out(result)
                else:
                    verdict.exhaust(f"devices: {result}")
                return None
            chosen.append(DeviceChoice(task.name, result[0], result[1]))
            taken.update(result[1])
    return tuple(chosen)


def _choose_group(request: DeviceAsk, node: Node, free: Callable[[str], bool],
                  short_offers: bool = False) -> tuple[DeviceGroup, tuple[str, ...]] | str:
    """The group and instances for one request, or the reason there are none: Nomad's words,
    "no devices match request" (`deviceAllocator.createOffer`, scheduler/feasible/device.go v2.0.5),
    which `AllocMetric.ExhaustedNode` records as the `devices: ...` dimension.

    With `short_offers`, as Nomad did before 1.11.1 (#27177, c785f9d50c; `createOffer` in
    scheduler/device.go v1.9.7 and v1.10.5, scheduler/feasible/device.go v1.11.0): a group is taken
    when it has `count` free instances of ANY kind and one pinned ID is in it
    (`nodeDeviceMatches`), and the offer keeps only its free pinned instances, even when that is
    fewer than `count`, or none (`rank.go` rejects only a nil offer)."""
    candidates: list[tuple[int, int, int, DeviceGroup, tuple[str, ...]]] = []
    reason = "missing devices"
    for order, group in enumerate(node.groups):
        if not name_matches(request.name, group) or not _group_constraints_hold(request, group):
            continue
        # An unhealthy instance is not allocatable at all, neither free nor held (devicehealth.py).
        pool = tuple(i for i in _pinned_pool(request, group) if node.healthy(i))
        available = tuple(i for i in pool if free(i))
        counted = sum(1 for i in group.ids if free(i) and node.healthy(i)) if short_offers else len(available)
        if counted >= request.count:
            affinity = sum(a.weight for a in request.affinities
                           if _device_check(Constraint(a.ltarget, a.rtarget, a.operand), group))
            # Fewest free instances first: binpack inside a node as across nodes.
            candidates.append((-affinity, counted, order, group, available[: request.count]))
        elif _id_constraints(request) and len(pool) >= request.count:
            reason = _PINNED_HELD
        elif reason != _PINNED_HELD:
            reason = NO_MATCH
    if not candidates:
        return reason
    _, _, _, group, ids = min(candidates, key=lambda c: c[:3])
    return group, ids


NO_MATCH = "no devices match request"
_PINNED_HELD = "pinned held"  # ours, never shown: Nomad says NO_MATCH, the audit counts a refused double-booking


def name_matches(request: str, group: DeviceGroup) -> bool:
    """`gpu`, `nvidia/gpu`, or `nvidia/gpu/<exact Name>` (reference section 7)."""
    parts = request.split("/", 2)
    if len(parts) == 1:
        return group.type == parts[0]
    if len(parts) == 2:
        return (group.vendor, group.type) == (parts[0], parts[1])
    return (group.vendor, group.type, group.name) == (parts[0], parts[1], parts[2])


def _id_constraints(request: DeviceAsk) -> list[Constraint]:
    return [c for c in request.constraints if c.ltarget == "${device.ids}"]


def _pinned_pool(request: DeviceAsk, group: DeviceGroup) -> tuple[str, ...]:
    """Instances the request may use: a `${device.ids}` constraint also filters instances (#18141)."""
    pool = group.ids
    for constraint in _id_constraints(request):
        if constraint.operand in ("set_contains", "set_contains_any"):
            listed = {part.strip() for part in constraint.rtarget.split(",")}
            pool = tuple(i for i in pool if i in listed)
    return pool


def _group_constraints_hold(request: DeviceAsk, group: DeviceGroup) -> bool:
    return all(_device_check(c, group) for c in request.constraints)


def _device_check(constraint: Constraint, group: DeviceGroup) -> bool:
    """A device constraint (`scheduler/feasible/device.go`, v2.0.5): `${device.ids|vendor|type|model}`
    and typed `${device.attr.<name>}` (numbers compare with their units); unknown targets are not found."""
    target, operand = constraint.ltarget, constraint.operand
    simple = {"${device.ids}": ",".join(group.ids), "${device.vendor}": group.vendor, "${device.type}": group.type,
              "${device.model}": group.name}
    if target in simple:
        return constraints.holds(operand, simple[target], constraint.rtarget, True, True)
    attribute = group.attributes().get(target[len("${device.attr."):-1]) if target.startswith(
        "${device.attr.") and target.endswith("}") else None
    if attribute is None:
        return constraints.holds(operand, "", constraint.rtarget, False, True)
    if attribute.get("Int") is not None and operand in constraints.ORDER + constraints.EQUAL + constraints.NOT_EQUAL:
        return compare_quantities(attribute["Int"], attribute.get("Unit") or "", operand, constraint.rtarget)
    value = attribute.get("String")
    value = str(attribute["Int"]) if value is None and attribute.get("Int") is not None else value
    return constraints.holds(operand, value or "", constraint.rtarget, value is not None, True)


def _fill_score(ask: GroupAsk, view: NodeView, new_instances: int) -> float:
    node = view.node
    total = sum(len(group.instances) for group in node.groups)
    device_fill = (view.held_instances + new_instances) / total if total else 0.0
    cpu_fill = (view.used_cpu + ask.cpu) / node.usable_cpu
    memory_fill = (view.used_memory + ask.memory_mb) / node.usable_memory
    return 2 * device_fill + (cpu_fill + memory_fill) / 2
