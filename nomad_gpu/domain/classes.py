"""Workload classes (DESIGN 14): the user states intent, the operator's policy turns it into tiers.

A spec says `class: serving` and `gpu_memory: 14GiB`; it does not say "MIG 3g.40gb". This module holds
the operator's policy per class (which kinds of GPU capacity it may take, in which order of tiers, and
the size a class takes when the spec gives none) and turns a class and a size into an ordered list of
tiers of concrete alternatives over what the fleet has: the MIG profiles, whole GPUs and shared GPUs
whose memory (as Nomad reports it) holds the need. The core then places the first tier that has a
feasible alternative, choosing within it by its usual score; nothing here looks at what is free.

Pure: the fleet's facts come in as data (`fleet_facts`), so the same translation serves the service,
the simulator and the tests.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.inventory import Inventory
from nomad_gpu.domain.kinds.classopts import (
    MIB,
    Fact,
    OptionFact,
    Size,
    class_options,
    options_named,
    share_milli,
)
from nomad_gpu.domain.requests import GpuAsk

__all__ = ["DEFAULT_CLASS_POLICY", "DEFAULT_RULES", "GIB", "MIB", "ClassPolicy", "ClassRule", "KindName", "OptionFact",
           "Size", "Tier", "WorkloadClass", "fleet_facts", "kind_words", "share_milli", "tiers_for"]

KindName = str
"""A kind as a class policy and a spec name it (`gpu`, `mig`, `share`): a word of `domain/kinds/classopts.py`."""
GIB = 1 << 30


def kind_words() -> tuple[KindName, ...]:
    """The kinds a class may choose, as the policy names them (gpu, mig, share, then any registered)."""
    return tuple(o.word for o in class_options())


def shares_time(kind: KindName) -> bool:
    """Whether a class kind shares a GPU's time with other tenants (not `spatial`, `domain/kinds/base.py`)."""
    options = options_named(kind)
    return options is not None and not options.kind.spatial


class WorkloadClass(enum.Enum):
    SERVING = "serving"
    TRAINING = "training"
    HPO = "hpo"
    EXPLORATORY = "exploratory"
    INTERACTIVE = "interactive"

    @staticmethod
    def parse(name: str) -> WorkloadClass:
        try:
            return WorkloadClass(name)
        except ValueError:
            known = ", ".join(c.value for c in WorkloadClass)
            raise InvalidRequest(f"unknown class {name!r}; known: {known}") from None


@dataclass(frozen=True)
class ClassRule:
    """The operator's policy for one class."""

    tiers: tuple[tuple[KindName, ...], ...]
    """Kinds per tier, in order: the first tier with a feasible alternative wins."""
    default_gpu_memory: int | None = None
    """Bytes a group of this class needs when its spec gives no size; None = any memory."""
    default_count: int = 1
    """GPUs (or instances) per allocation when the spec gives no count."""
    allow_explicit: frozenset[KindName] = frozenset()
    """Kinds a spec may name itself (`mig:`, `share:`, `gpu:`) beside this class, beyond the tiers' own."""

    def __post_init__(self) -> None:
        if not self.tiers or any(not tier for tier in self.tiers):
            raise InvalidRequest("tiers: must list at least one tier, each with at least one kind")
        seen = [kind for tier in self.tiers for kind in tier]
        unknown = sorted(set(seen) - set(kind_words()))
        if unknown:
            raise InvalidRequest(f"tiers: unknown kind(s) {', '.join(unknown)}; known: {', '.join(kind_words())}")
        if len(set(seen)) != len(seen):
            raise InvalidRequest("tiers: a kind is listed twice")
        if self.default_gpu_memory is not None and self.default_gpu_memory <= 0:
            raise InvalidRequest("default_gpu_memory: must be more than 0")
        if self.default_count < 1:
            raise InvalidRequest("default_count: must be >= 1")

    @property
    def kinds(self) -> frozenset[KindName]:
        return frozenset(kind for tier in self.tiers for kind in tier)

    @property
    def isolated(self) -> bool:
        """No tier shares a GPU's time with another tenant."""
        return not any(shares_time(kind) for kind in self.kinds)

    def accepts(self, kind: KindName) -> bool:
        """Whether a spec may name `kind` itself beside this class."""
        return kind in self.kinds or kind in self.allow_explicit


DEFAULT_RULES: Mapping[WorkloadClass, ClassRule] = MappingProxyType({
    WorkloadClass.SERVING: ClassRule((("mig",), ("gpu",)), default_gpu_memory=8 * GIB),
    WorkloadClass.TRAINING: ClassRule((("gpu",),)),
    WorkloadClass.HPO: ClassRule((("share",), ("mig",), ("gpu",)), default_gpu_memory=8 * GIB),
    WorkloadClass.EXPLORATORY: ClassRule((("share",), ("mig",), ("gpu",)), default_gpu_memory=8 * GIB),
    WorkloadClass.INTERACTIVE: ClassRule((("share",), ("mig",), ("gpu",)), default_gpu_memory=8 * GIB),
})
"""The defaults (docs/classes.md): serving is isolated (MIG, then one whole GPU; never a share); training
takes whole GPUs of any memory; the exploratory classes share a GPU's time first, then take an isolated
MIG instance, then a whole GPU."""


@dataclass(frozen=True)
class ClassPolicy:
    """The operator's rules for every class; a class the config leaves out keeps its default."""

    rules: Mapping[WorkloadClass, ClassRule] = field(default_factory=lambda: DEFAULT_RULES)

    def rule(self, cls: WorkloadClass) -> ClassRule:
        return self.rules.get(cls) or DEFAULT_RULES[cls]

    def check_explicit(self, cls: WorkloadClass, kind: KindName) -> None:
        """Refuse a kind a spec names beside a class whose policy does not take it, in one line."""
        rule = self.rule(cls)
        if rule.accepts(kind):
            return
        why = "it breaks isolation" if rule.isolated and shares_time(kind) else f"{cls.value} takes {_kinds(rule)}"
        raise InvalidRequest(f"class {cls.value} with {kind}: is refused: {why} "
                             f"(the service config's classes.{cls.value}.allow_explicit can allow it)")


DEFAULT_CLASS_POLICY = ClassPolicy()


def _kinds(rule: ClassRule) -> str:
    return " then ".join("/".join(tier) for tier in rule.tiers)


def fleet_facts(inventory: Inventory) -> tuple[OptionFact, ...]:
    """Every distinct device kind of the fleet, sorted: the facts the tiers are built over."""
    seen: set[Fact] = set()  # plain tuples: a fleet has thousands of GPUs
    options = class_options()
    for node in inventory:
        for kind in options:
            seen.update(kind.facts(node))
    return tuple(sorted(OptionFact(*fact) for fact in seen))


@dataclass(frozen=True)
class Tier:
    """One tier of a class's choice: its number (1-based), its kinds and the alternatives that fit."""

    number: int
    kinds: tuple[KindName, ...]
    alternatives: tuple[GpuAsk, ...]


def tiers_for(cls: WorkloadClass, size: Size, policy: ClassPolicy,
              facts: Iterable[OptionFact]) -> tuple[Tier, ...]:
    """The class's tiers over the fleet: per tier, every alternative whose device holds the size.

    Deterministic (alternatives in the order of the sorted facts). A tier with nothing that fits in the
    fleet stays in the list, empty, so that tier numbers are the policy's and a wait can say why."""
    rule = policy.rule(cls)
    facts = tuple(sorted(set(facts)))
    return tuple(Tier(number, kinds, tuple(alt for kind in kinds for alt in _alternatives(kind, size, facts)))
                 for number, kinds in enumerate(rule.tiers, start=1))


def _alternatives(kind: KindName, size: Size, facts: tuple[OptionFact, ...]) -> list[GpuAsk]:
    options = options_named(kind)
    if options is None:
        return []
    return options.alternatives(size, [f for f in facts if f.kind == kind and size.allows(f.model)
                                       and size.holds(f.memory_mib)])
