"""The words for a class's choice: what was chosen and why, or why no tier fits (DESIGN 14).

A user who wrote `class: serving` and `gpu_memory: 14GiB` did not name a MIG profile, so the entry must
say what the service chose for it and on what grounds ("serving -> MIG 3g.40gb on h100-mig-1: needs
14 GiB; isolated; tier 1"), and a waiting entry must say which tier found nothing and what else is free
that the class will not take ("serving: no isolated option with >= 14 GiB free; 3 shares free").
`status`, `queue --wide`, the API and the dashboard show these same lines. Pure: the counts come in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nomad_gpu.domain.classes import GIB, ClassRule, KindName, OptionFact, Size, WorkloadClass, share_milli
from nomad_gpu.domain.ids import MILLI_PER_GPU

if TYPE_CHECKING:
    from nomad_gpu.domain.freeindex import NodeFree

_NOUN: Mapping[KindName, tuple[str, str]] = {
    "mig": ("MIG instance", "MIG instances"),
    "gpu": ("whole GPU", "whole GPUs"),
    "share": ("share", "shares"),
}


def gib(amount: int) -> str:
    """`14 GiB`, `9.75 GiB`: at most two decimals, rounded up, so a need is never shown smaller than it is."""
    hundredths = -(-amount * 100 // GIB)
    whole, frac = divmod(hundredths, 100)
    return f"{whole} GiB" if frac == 0 else f"{whole}.{frac:02d}".rstrip("0") + " GiB"


def need_text(size: Size) -> str:
    return "any memory" if size.need is None else f"needs {gib(size.need)}"


def _plural(kind: KindName, n: int) -> str:
    one, many = _NOUN[kind]
    return f"{n} {one if n == 1 else many}"


@dataclass(frozen=True)
class Choice:
    """What a tier gave one group: the device in words (`MIG 3g.40gb`, `share 250/1000 of NVIDIA L40S`,
    `2 whole GPUs NVIDIA H100 80GB HBM3`), where, and from which tier."""

    cls: WorkloadClass
    size: Size
    kind: KindName
    device: str
    node: str
    tier: int
    whole_share: bool = False
    """A share of every slot of its GPU: no other tenant can join while it runs."""

    def text(self) -> str:
        grounds = "time-shared" if self.kind == "share" and not self.whole_share else "isolated"
        return f"{self.cls.value} -> {self.device} on {self.node}: {need_text(self.size)}; {grounds}; tier {self.tier}"


def device_text(kind: KindName, model: str, count: int = 1, profile: str = "", milli: int = 0) -> str:
    """The chosen device in a user's words."""
    if kind == "mig":
        return f"MIG {profile}" if count == 1 else f"{count} x MIG {profile}"
    if kind == "share":
        return f"all of shared {model}" if milli >= MILLI_PER_GPU else f"share {milli}/1000 of {model}"
    return f"whole GPU {model}" if count == 1 else f"{count} whole GPUs {model}"


def wait_text(cls: WorkloadClass, rule: ClassRule, size: Size, fitting_free: Mapping[KindName, int],
              free: Mapping[KindName, int], in_fleet: Mapping[KindName, int]) -> str:
    """Why no tier of the class fits now.

    `fitting_free`: free options of each kind that hold the size (feasible or not for other reasons, such as
    CPU or quota); `free`: free options of each kind whatever their memory; `in_fleet`: options of each kind
    in the fleet that hold the size, free or not."""
    kinds: Sequence[KindName] = [k for tier in rule.tiers for k in tier]
    what = "isolated option" if rule.isolated else " or ".join(_NOUN[k][0] for k in kinds)
    floor = "" if size.need is None else f" with >= {gib(size.need)}"
    if not any(in_fleet.get(k, 0) for k in kinds):
        head = f"{cls.value}: no {what}{floor} in the fleet"
    elif any(fitting_free.get(k, 0) for k in kinds):
        free_fit = ", ".join(_plural(k, fitting_free[k]) for k in kinds if fitting_free.get(k, 0))
        head = f"{cls.value}: {free_fit}{floor} free, none placeable now"
    else:
        head = f"{cls.value}: no {what}{floor} free"
    others = [_plural(k, free[k]) for k in ("share", "mig", "gpu") if k not in kinds and free.get(k, 0)]
    smaller = [_plural(k, free[k] - fitting_free.get(k, 0)) + " too small"
               for k in kinds if free.get(k, 0) > fitting_free.get(k, 0) and k != "share"]
    tail = [f"{', '.join(others)} free" if others else "", "; ".join(smaller)]
    return "; ".join([head, *[t for t in tail if t]])


@dataclass(frozen=True)
class FreeCounts:
    """What a waiting class's line counts, per kind: free options that hold the size, free options of any
    size, and the fleet's device kinds (free or not) that hold it."""

    fitting_free: Mapping[KindName, int]
    free: Mapping[KindName, int]
    in_fleet: Mapping[KindName, int]


def free_counts(nodes: Iterable[NodeFree], size: Size, facts: Iterable[OptionFact]) -> FreeCounts:
    """Count over the schedulable nodes' free state: whole GPUs fully free, MIG instances free, and share
    room (free share instances of the device plugin's GPUs, else shared GPUs with room and a tenant slot)."""
    fitting: dict[KindName, int] = {}
    free: dict[KindName, int] = {}

    def add(kind: KindName, n: int, fits: bool) -> None:
        free[kind] = free.get(kind, 0) + n
        if fits:
            fitting[kind] = fitting.get(kind, 0) + n

    for nf in nodes:
        if not nf.offered:
            continue
        for model, ids in nf.whole_free().items():
            for gid in ids:
                add("gpu", 1, size.allows(model) and size.holds(nf.gpus[gid].memory_mib))
        memory = {m.id: m for m in nf.node.migs}
        for ids in nf.mig_free.values():
            for mid in ids:
                mig = memory[mid]
                add("mig", 1, size.allows(mig.model) and size.holds(mig.memory_mib))
        for gid, gpu in nf.gpus.items():
            if not gpu.mode.takes_shares or nf.gpu_free[gid] <= 0:
                continue
            if gpu.max_tenants is not None and nf.tenants.get(gid, 0) >= gpu.max_tenants:
                continue
            room = len(nf.slot_free.get(gid, ())) or 1
            slots = len(gpu.share_ids) or (gpu.max_tenants or 0)
            milli = MILLI_PER_GPU if size.need is None else share_milli(size.need, gpu.memory_mib, slots)
            add("share", room, size.count == 1 and size.allows(gpu.model) and milli is not None
                and milli <= nf.gpu_free[gid])
    in_fleet: dict[KindName, int] = {}
    for f in facts:
        if size.allows(f.model) and size.holds(f.memory_mib):
            in_fleet[f.kind] = in_fleet.get(f.kind, 0) + 1
    return FreeCounts(fitting, free, in_fleet)
