"""What a workload class may choose of each kind: the fleet's devices of that kind, and the asks that hold a size.

A class's policy names kinds by the words a spec uses (``gpu``, ``mig``, ``share``); each word is a
`ClassOptions` registered here, so `domain/classes.py` builds a class's tiers without knowing any kind.
A kind a class may not choose (one a deployment adds without class options) registers none: specs may
still name it by its own field. `Size` and `OptionFact` (a group's size, one device the fleet has) live
here because the options are written in them; `domain/classes.py` re-exports them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import MILLI_PER_GPU
from nomad_gpu.domain.kinds.base import GpuAsk, GpuKind
from nomad_gpu.domain.kinds.mig import MIG, MigSlices
from nomad_gpu.domain.kinds.share import SHARE, GpuShare
from nomad_gpu.domain.kinds.whole import WHOLE, WholeGpus

if TYPE_CHECKING:
    from nomad_gpu.domain.inventory import Node

MIB = 1 << 20

Fact = tuple[str, str, int, str, int]
"""An `OptionFact` as a plain tuple (a fleet has thousands of GPUs: built as tuples, made facts once)."""


@dataclass(frozen=True)
class Size:
    """A group's size in the user's terms."""

    need: int | None = None
    """Bytes of GPU memory per device the workload needs; None = any."""
    count: int = 1
    """Devices per allocation (a share is always one)."""
    models: frozenset[str] = frozenset()
    """Allowed GPU models; empty = any."""

    def __post_init__(self) -> None:
        if self.need is not None and self.need <= 0:
            raise InvalidRequest("gpu_memory must be more than 0")
        if self.count < 1:
            raise InvalidRequest("count must be >= 1")

    def holds(self, memory_mib: int) -> bool:
        """Whether a device reporting `memory_mib` (the fingerprint's `memory`, whole MiB) fits the need."""
        return self.need is None or memory_mib * MIB >= self.need

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models


@dataclass(frozen=True, order=True)
class OptionFact:
    """One kind of device the fleet has, with the memory Nomad reports for it."""

    kind: str
    model: str
    memory_mib: int
    profile: str = ""
    """The MIG profile (`3g.40gb`); empty for whole and shared GPUs."""
    slots: int = 0
    """A shared GPU's share instances (or the config's tenant cap); 0 = counted in milli only."""


class ClassOptions(Protocol):
    """One kind as a class chooses it."""

    @property
    def word(self) -> str:
        """The kind as a class policy and a spec name it (``gpu``, ``mig``, ``share``)."""
        ...

    @property
    def kind(self) -> GpuKind: ...

    def facts(self, node: Node) -> Iterable[Fact]:
        """The node's devices of this kind, as facts (their memory, profile, slots)."""
        ...

    def alternatives(self, size: Size, facts: Sequence[OptionFact]) -> list[GpuAsk]:
        """The asks that hold `size`, over this kind's `facts` that allow and hold it (in their order)."""
        ...


def share_milli(need: int, memory_mib: int, slots: int) -> int | None:
    """The milli of a share that covers `need` bytes of a GPU with `memory_mib`: need / memory of its time,
    rounded up to whole slots where the GPU has slots; None when the need is more than the GPU."""
    memory = memory_mib * MIB
    if memory <= 0 or need > memory:
        return None
    if slots > 0:
        taken = -(-need * slots // memory)
        return taken * MILLI_PER_GPU // slots
    return -(-need * MILLI_PER_GPU // memory)


class WholeOptions:
    word = "gpu"
    kind: GpuKind = WHOLE

    def facts(self, node: Node) -> Iterable[Fact]:
        return [("gpu", g.model, g.memory_mib, "", 0) for g in node.gpus if g.mode.takes_whole]

    def alternatives(self, size: Size, facts: Sequence[OptionFact]) -> list[GpuAsk]:
        if not facts:
            return []
        floor = 0 if size.need is None else -(-size.need // MIB)
        return [WholeGpus(size.count, size.models, floor)]


class MigOptions:
    word = "mig"
    kind: GpuKind = MIG

    def facts(self, node: Node) -> Iterable[Fact]:
        return [("mig", m.model, m.memory_mib, m.profile.name, 0) for m in node.migs]

    def alternatives(self, size: Size, facts: Sequence[OptionFact]) -> list[GpuAsk]:
        models: dict[str, set[str]] = {}
        for f in facts:
            models.setdefault(f.profile, set()).add(f.model)
        return [MigSlices(profile, size.count, frozenset(models[profile])) for profile in sorted(models)]


class ShareOptions:
    word = "share"
    kind: GpuKind = SHARE

    def facts(self, node: Node) -> Iterable[Fact]:
        return [("share", g.model, g.memory_mib, "", len(g.share_ids) or (g.max_tenants or 0))
                for g in node.gpus if g.mode.takes_shares]

    def alternatives(self, size: Size, facts: Sequence[OptionFact]) -> list[GpuAsk]:
        if size.count != 1:  # a share is part of ONE GPU
            return []
        shares: dict[tuple[int, str], GpuShare] = {}
        for f in facts:
            milli = MILLI_PER_GPU if size.need is None else share_milli(size.need, f.memory_mib, f.slots)
            if milli is not None:
                shares.setdefault((milli, f.model), GpuShare(milli, frozenset({f.model})))
        return [shares[key] for key in sorted(shares)]


_OPTIONS: dict[str, ClassOptions] = {}


def register_options(options: ClassOptions) -> ClassOptions:
    """Let classes choose a kind (idempotent for the same object); a second under a taken word is a bug."""
    found = _OPTIONS.get(options.word)
    if found is not None and found is not options:
        raise ValueError(f"class options for {options.word!r} are already registered")
    _OPTIONS[options.word] = options
    return options


def unregister_options(word: str) -> None:
    _OPTIONS.pop(word, None)


def class_options() -> tuple[ClassOptions, ...]:
    """Every kind a class may choose, in registration order (gpu, mig, share first)."""
    return tuple(_OPTIONS.values())


def options_named(word: str) -> ClassOptions | None:
    return _OPTIONS.get(word)


def word_of(kind: GpuKind) -> str | None:
    """The word a class names `kind` by; None for a kind no class chooses."""
    return next((o.word for o in _OPTIONS.values() if o.kind.name == kind.name), None)


for _builtin in (WholeOptions(), MigOptions(), ShareOptions()):
    register_options(_builtin)
