"""Between a spec's `class`/`gpu_memory` and the core's classes: checks at submission, sizes per group.

The spec (render) and the policy (domain) do not know each other: this module reads a group's class and
size in the user's terms and gives the core a `WorkloadClass` and a `Size`, with the operator's default
size where the spec gives none. At submission it refuses, in one line, a kind a spec names itself beside a
class whose policy does not take it (`class: serving` with `share:` breaks isolation) unless the config
allows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nomad_gpu.domain.classes import (
    ClassPolicy,
    OptionFact,
    Size,
    Tier,
    WorkloadClass,
    fleet_facts,
    tiers_for,
)
from nomad_gpu.domain.classexplain import Choice, device_text, free_counts, wait_text
from nomad_gpu.domain.errors import InvalidRequest, Unschedulable
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import MILLI_PER_GPU
from nomad_gpu.domain.inventory import Inventory
from nomad_gpu.domain.kinds import kind_of
from nomad_gpu.domain.kinds.classopts import word_of
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement, WaitReason
from nomad_gpu.domain.preemption import PreemptionPolicy
from nomad_gpu.domain.requests import GpuAsk, WholeGpus
from nomad_gpu.domain.units import split_mig_device_name
from nomad_gpu.render import JobSpec, SweepSpec
from nomad_gpu.render.groupspec import GroupSpec
from nomad_gpu.service.asks.kindasks import written_field

__all__ = ["NO_OPTION", "ClassBook", "check_classes", "class_of", "resolved", "size_of"]


def class_of(spec: JobSpec | SweepSpec, group: GroupSpec) -> WorkloadClass | None:
    name = spec.class_of(group)
    return None if name is None else WorkloadClass(name)


def check_classes(spec: JobSpec | SweepSpec, policy: ClassPolicy) -> None:
    """Refuse an explicit kind beside a class that does not take it (InvalidRequest, one line)."""
    for group in spec.groups:
        cls = class_of(spec, group)
        kind = group.capacity_kind
        if cls is None or kind is None:
            continue
        if group.workload_class is None and spec.workload_class is None:
            continue  # a sweep's implicit `hpo` checks nothing: an explicit kind keeps working as before
        try:
            policy.check_explicit(cls, kind)
        except InvalidRequest as exc:
            raise InvalidRequest(f"groups[{group.name}]: {exc}") from None


def size_of(spec: JobSpec | SweepSpec, group: GroupSpec, policy: ClassPolicy) -> Size:
    """The group's size for its class's tiers: its `gpu_memory` (else the class's default), its `gpu.count`
    (else the class's default count) and its `gpu.models`."""
    cls = class_of(spec, group)
    if cls is None:
        raise InvalidRequest(f"groups[{group.name}]: no class to size")
    rule = policy.rule(cls)
    need = group.gpu_memory_bytes
    if need is None:
        need = rule.default_gpu_memory
    count = group.gpu.count if group.gpu is not None else rule.default_count
    models = frozenset(group.gpu.models or ()) if group.gpu is not None else frozenset()
    return Size(need, count, models)


def job_class(spec: JobSpec | None) -> str | None:
    """The job's class: its own, else its first group's (a group may not differ in preemptibility)."""
    if spec is None:
        return None
    cls = spec.class_of(spec.groups[0]) if spec.groups else spec.workload_class
    return str(cls) if cls is not None else None


class ClassBook:
    """The operator's policy and the fleet's device facts as last seen: a class's tiers are built over the
    facts, so `version` moves whenever they change (a node joins, a MIG layout changes) and the requests of
    waiting class entries are built again."""

    def __init__(self, policy: ClassPolicy | None = None, victims: PreemptionPolicy | None = None) -> None:
        self.policy = policy or ClassPolicy()
        self.victims = victims or PreemptionPolicy()
        """Which jobs may be stopped for others (and so may run on a cohort's lent quota)."""
        self._facts: tuple[OptionFact, ...] = ()
        self._version = 0
        self._seen: Inventory | None = None
        self._read: Inventory | None = None
        """The inventory `_facts` were read from: facts are read only when a class entry needs them."""
        self._built: dict[str, int] = {}
        """Entry -> the version of the facts its request's tiers were last built over."""

    def preemptible(self, spec: JobSpec) -> bool:
        """Whether the job's attempts may be stopped for others: its spec's `preemptible:`, else its class's."""
        return self.victims.victim_allowed(job_class(spec), spec.preemptible, spec.checkpoint is not None)

    def observe(self, inventory: Inventory) -> None:
        """The fleet as it now is; its facts are read from it when a class entry first needs them (a queue
        without class entries pays nothing)."""
        self._seen = inventory

    @property
    def facts(self) -> tuple[OptionFact, ...]:
        if self._seen is not None and self._seen is not self._read:
            self._read = self._seen
            facts = fleet_facts(self._seen)
            if facts != self._facts:
                self._facts, self._version = facts, self._version + 1
                self._built.clear()
        return self._facts

    @property
    def version(self) -> int:
        """Moves whenever the facts change."""
        _ = self.facts
        return self._version

    def stale(self, entry_id: str, spec: JobSpec | None) -> bool:
        """Whether a waiting entry's class tiers must be built again (the facts moved since); records that
        they are being built now."""
        if spec is None or not any(spec.chooses_kind(g) for g in spec.groups):
            return False
        if self._built.get(entry_id) == self.version:
            return False
        if len(self._built) > 100_000:
            self._built.clear()
        self._built[entry_id] = self.version
        return True

    def check_fleet(self, spec: JobSpec | SweepSpec) -> None:
        """Refuse (`Unschedulable`) a spec with a class group that no tier can ever serve in this fleet."""
        if spec.allow_unschedulable or not self.facts:
            return
        for group in spec.groups:
            if not spec.chooses_kind(group) or any(t.alternatives for t in self.tiers(spec, group)):
                continue
            cls = class_of(spec, group)
            assert cls is not None
            size = size_of(spec, group, self.policy)
            text = wait_text(cls, self.policy.rule(cls), size, {}, {}, {})
            raise Unschedulable(f"unschedulable: groups[{group.name}]: {text}; submit with --allow-unschedulable "
                                "(allow_unschedulable: true) to queue it anyway")

    def tiers(self, spec: JobSpec | SweepSpec, group: GroupSpec) -> tuple[Tier, ...]:
        cls = class_of(spec, group)
        if cls is None:
            raise InvalidRequest(f"groups[{group.name}]: no class to choose a kind by")
        return tiers_for(cls, size_of(spec, group, self.policy), self.policy, self.facts)

    def gpu_ask(self, spec: JobSpec, group: GroupSpec) -> tuple[GpuAsk | None, tuple[tuple[GpuAsk, ...], ...]]:
        """(gpu, tiers) for `AllocAsk`: the class's tiers that have an alternative in the fleet; when none
        has, a request nothing can hold, so the entry waits (its reason says that nothing in the fleet
        fits) instead of running without a GPU."""
        tiers = tuple(t.alternatives for t in self.tiers(spec, group) if t.alternatives)
        if tiers:
            return None, tiers
        return WholeGpus(1, frozenset({NO_OPTION})), ()

    def choice_in(self, spec: JobSpec | None, p: AllocPlacement, ledger: Ledger) -> str | None:
        """`choice`, naming the node as the ledger knows it."""
        if spec is None:
            return None
        nf = ledger.node_free(p.node)
        return self.choice(spec, p, (nf.node.name if nf is not None else "") or str(p.node))

    def choice(self, spec: JobSpec, p: AllocPlacement, node_name: str) -> str | None:
        """The explanation stored with a placement of a group whose class chose its kind; None otherwise."""
        group = next((g for g in spec.groups if g.name == p.group), None)
        if group is None or not spec.chooses_kind(group):
            return None
        cls = class_of(spec, group)
        kind = kind_of(p)
        if cls is None or kind is None:
            return None
        mine = word_of(kind)  # the kind as the policy and the spec name it (domain/kinds/classopts.py)
        if mine is None:
            return None
        rule = self.policy.rule(cls)
        tier = next((n for n, kinds in enumerate(rule.tiers, start=1) if mine in kinds), 0)
        size = size_of(spec, group, self.policy)
        device = p.device_name or ""
        split = split_mig_device_name(device)
        text = device_text(mine, split[0] if split else device, count=max(len(p.instance_ids), 1) if mine != "share"
                           else 1, profile=split[1] if split else "", milli=p.share_milli)
        whole_share = mine == "share" and p.share_milli >= MILLI_PER_GPU
        return Choice(cls, size, mine, text, node_name, tier, whole_share).text()

    def wait_line(self, spec: JobSpec | None, reason: WaitReason, ledger: Ledger,
                  memo: dict[object, Any]) -> str | None:
        """A waiting entry's reason when a class chose its kind and capacity is what it waits for (a quota,
        a hold or room kept for another job are said as the core says them); `memo`: one cycle's."""
        if spec is None or reason in _NOT_CAPACITY or not any(spec.chooses_kind(g) for g in spec.groups):
            return None
        nodes = memo.get(_NODES)
        if nodes is None:
            nodes = memo[_NODES] = list(ledger.index.nodes())
        return self.waiting(spec, nodes, memo)

    def waiting(self, spec: JobSpec, nodes: Sequence[NodeFree],
                memo: dict[object, Any] | None = None) -> str | None:
        """Why a waiting entry's class-chosen groups find no tier (the first such group); None when it has
        none. `memo`: one cycle's lines by class and size (many entries ask alike)."""
        for group in spec.groups:
            if not spec.chooses_kind(group):
                continue
            cls = class_of(spec, group)
            if cls is None:
                continue
            size = size_of(spec, group, self.policy)
            key = (cls, size)
            text = memo.get(key) if memo is not None else None
            assert text is None or isinstance(text, str)
            if text is None:
                counts = free_counts(nodes, size, self.facts)
                text = wait_text(cls, self.policy.rule(cls), size, counts.fitting_free, counts.free, counts.in_fleet)
                if memo is not None:
                    memo[key] = text
            return text if len(spec.groups) == 1 else f"group {group.name!r}: {text}"
        return None


_NOT_CAPACITY = frozenset({WaitReason.QUOTA, WaitReason.RESERVED, WaitReason.HELD})
_NODES = "nodes"


NO_OPTION = "(no option of its class fits in the fleet)"
"""The model of the request a class group waits on when no tier has an alternative: no GPU is named so."""


def resolved(spec: JobSpec, placements: Sequence[AllocPlacement]) -> JobSpec:
    """The spec with each class-chosen group's kind written in, as the placement chose it, so that it renders
    exactly as a spec naming that kind does (`mig: {profile: 3g.40gb}`, `share: {milli: 250}`, `gpu:`)."""
    if not any(spec.chooses_kind(g) for g in spec.groups):
        return spec
    groups = []
    for group in spec.groups:
        mine = [p for p in placements if p.group == group.name]
        kind = kind_of(mine[0]) if mine and spec.chooses_kind(group) else None
        if kind is None:
            groups.append(group)
            continue
        field, value = written_field(kind.name, mine[0], group.name)  # service/asks/kindasks.py
        update: dict[str, object] = {"gpu_memory": None, field: value}
        groups.append(group.model_copy(update=update))
    return spec.model_copy(update={"groups": groups})
