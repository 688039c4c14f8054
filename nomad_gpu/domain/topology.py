"""How the GPUs of one node reach each other, and how close a set of them is (its link class).

A 4-GPU data-parallel job spends much of each step in all-reduce. On GPUs joined by NVLink (bridged
pairs, or all of them through an NVSwitch) that runs several times faster than over PCIe, and over
PCIe it is faster under one switch or one CPU socket than across sockets. Nomad and its stock NVIDIA
plugin place "any N GPUs of a model"; the project's device plugin reads the topology with NVML and
publishes it (`topowire.py`), and the core uses this value to prefer closer sets.

A node whose plugin publishes no topology (the stock plugin) has `Node.topology` None: nothing is known
of how its GPUs are joined (NVLink or PCIe), and every set on it has the class `PCIE`, said "topology
unknown".
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nomad_gpu.domain.ids import InstanceId


class LinkClass(enum.IntEnum):
    """How close a set of two or more GPUs of one node is; a higher value is closer."""

    PCIE = 0
    """Topology unknown (the stock plugin publishes none): NVLink or PCIe, nobody said."""
    SYSTEM = 1
    """Known, and the set spans CPU sockets (NUMA nodes)."""
    NUMA = 2
    """All on one NUMA node (one CPU socket), not under one PCIe switch."""
    SWITCH = 3
    """All under one PCIe switch."""
    NVLINK = 4
    """Every GPU has an NVLink peer inside the set: one NVSwitch fabric, or whole NVLink pairs."""

    @property
    def label(self) -> str:
        """What a person reads after "4 x A100 on a100-1, ..."."""
        return _LABELS[self]

    @property
    def tier(self) -> int:
        """The three ranks the core prefers by: NVLink (2), one NUMA node or PCIe switch (1), anything (0)."""
        return 2 if self is LinkClass.NVLINK else 1 if self in (LinkClass.SWITCH, LinkClass.NUMA) else 0


_LABELS = {
    LinkClass.PCIE: "topology unknown",
    LinkClass.SYSTEM: "PCIe across NUMA nodes",
    LinkClass.NUMA: "PCIe, one NUMA node",
    LinkClass.SWITCH: "PCIe, one switch",
    LinkClass.NVLINK: "NVLink",
}


@dataclass(frozen=True)
class GpuPlace:
    """Where one GPU sits on its node. None: the plugin did not say."""

    numa: int | None = None
    """The NUMA node (CPU socket side) the GPU hangs off."""
    switch: int | None = None
    """The PCIe switch it sits under, numbered per node; GPUs with the same number share one."""
    nvswitch: bool = False
    """On the node's NVSwitch fabric: NVLink to every other GPU on it."""
    peers: tuple[tuple[InstanceId, int], ...] = ()
    """GPUs reached by direct NVLink (a bridge), with the number of links, sorted."""


@dataclass(frozen=True)
class Topology:
    """The places of a node's GPUs, by instance ID. GPUs not listed have an unknown place."""

    places: tuple[tuple[InstanceId, GpuPlace], ...] = ()
    _by_id: dict[InstanceId, GpuPlace] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", dict(self.places))

    @staticmethod
    def of(places: Mapping[InstanceId, GpuPlace]) -> Topology:
        return Topology(tuple(sorted(places.items())))

    def place(self, gpu: InstanceId) -> GpuPlace | None:
        return self._by_id.get(gpu)

    def nvlinked(self, a: InstanceId, b: InstanceId) -> bool:
        """Whether NVLink joins the two GPUs, directly or through the NVSwitch fabric."""
        if a == b:
            return False
        pa, pb = self._by_id.get(a), self._by_id.get(b)
        if pa is None or pb is None:
            return False
        if pa.nvswitch and pb.nvswitch:
            return True
        return any(peer == b for peer, _ in pa.peers) or any(peer == a for peer, _ in pb.peers)

    def link_class(self, gpus: Iterable[InstanceId]) -> LinkClass | None:
        """The class of a set of GPUs; None for fewer than two (a single GPU has no link to speak of)."""
        ids = sorted(set(gpus))
        if len(ids) < 2:
            return None
        if all(any(self.nvlinked(a, b) for b in ids) for a in ids):
            return LinkClass.NVLINK
        places = [self._by_id.get(i) for i in ids]
        if any(p is None for p in places):
            return LinkClass.SYSTEM if any(p is not None for p in places) else LinkClass.PCIE
        known = [p for p in places if p is not None]
        if _same(p.switch for p in known):
            return LinkClass.SWITCH
        if _same(p.numa for p in known):
            return LinkClass.NUMA
        return LinkClass.SYSTEM

    def layout_key(self, order: Sequence[InstanceId]) -> str:
        """The topology by position in `order` (the node's GPUs in device order), not by ID: two nodes
        whose GPUs sit alike get the same key (the free-capacity index keys score memos by it)."""
        position = {gpu: k for k, gpu in enumerate(order)}
        parts = []
        for gpu in order:
            p = self._by_id.get(gpu)
            if p is None:
                parts.append("?")
                continue
            peers = ",".join(f"{position[i]}*{n}" for i, n in p.peers if i in position)
            parts.append(f"{_text(p.numa)}.{_text(p.switch)}.{'S' if p.nvswitch else ''}.{peers}")
        return " ".join(parts)

    def nvlink_groups(self) -> list[tuple[InstanceId, ...]]:
        """The node's NVLink-connected groups (two GPUs or more each), sorted, for display."""
        ids = [i for i, _ in self.places]
        seen: set[InstanceId] = set()
        out: list[tuple[InstanceId, ...]] = []
        for start in ids:
            if start in seen:
                continue
            group, todo = {start}, [start]
            while todo:
                a = todo.pop()
                for b in ids:
                    if b not in group and self.nvlinked(a, b):
                        group.add(b)
                        todo.append(b)
            seen |= group
            if len(group) > 1:
                out.append(tuple(sorted(group)))
        return sorted(out)

    def numa_nodes(self) -> list[tuple[int, tuple[InstanceId, ...]]]:
        """GPUs by NUMA node, for display; GPUs of unknown NUMA node are left out."""
        by: dict[int, list[InstanceId]] = {}
        for gpu, place in self.places:
            if place.numa is not None:
                by.setdefault(place.numa, []).append(gpu)
        return [(numa, tuple(sorted(gpus))) for numa, gpus in sorted(by.items())]


def link_class(topology: Topology | None, gpus: Sequence[InstanceId]) -> LinkClass | None:
    """The class of a set on a node of this topology (None: no topology published, so unknown)."""
    if len(set(gpus)) < 2:
        return None
    return LinkClass.PCIE if topology is None else topology.link_class(gpus)


def _text(value: int | None) -> str:
    return "-" if value is None else str(value)


def _same(values: Iterable[int | None]) -> bool:
    seen = set(values)
    return len(seen) == 1 and None not in seen
