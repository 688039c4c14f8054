"""How the GPUs of a node reach each other: PCIe distance per pair, NVLink, NVSwitch and NUMA, read from NVML.

Cheap enough to read on every fingerprint (n^2/2 topology calls, at most 18 link probes and one NUMA
call per GPU), and only ever on physical GPUs: MIG devices have no peer-to-peer at all. `places` turns
the pairwise figures into what the device plugin publishes per GPU: its NUMA node, the PCIe switch it
sits under, whether it is on the NVSwitch fabric, and its direct NVLink peers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from nomad_gpu.nvml import codes
from nomad_gpu.nvml.model import Gpu, Inventory, Link

SAME_SWITCH = frozenset({"board", "switch"})
"""Common ancestors that mean "under one PCIe switch" (nvidia-smi topo's PIX, or one board)."""
ACROSS_SOCKETS = "system"
"""The common ancestor that means the path crosses the CPU interconnect (nvidia-smi topo's SYS)."""


def _call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:
        if not isinstance(getattr(exc, "value", None), int):
            raise
        return None


def _bus(bus_id: Any) -> str:
    # NVML prints bus ids with an 8- or 4-digit domain and either case; compare the tail, lower-cased.
    text = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    domain, _, rest = text.lower().rpartition(":")
    domain, _, bus = domain.rpartition(":") if ":" in domain else ("", "", domain)
    return f"{int(domain or '0', 16):x}:{bus}:{rest}"


def read_links(nvml: Any, gpus: Sequence[tuple[Gpu, Any]]) -> tuple[list[Link], frozenset[str]]:
    """Links between every pair of readable GPUs, and the GPUs that hang on an NVSwitch fabric."""
    by_bus = {_bus(g.pci_bus_id): g.uuid for g, _ in gpus if g.pci_bus_id}
    nvlinks: Counter[tuple[str, str]] = Counter()
    fabric: set[str] = set()
    for gpu, handle in gpus:
        for link in range(codes.NVLINK_MAX_LINKS):
            state = _call(nvml.nvmlDeviceGetNvLinkState, handle, link)
            if state is None:
                if link == 0:
                    break  # no NVLink on this GPU at all
                continue
            if state != codes.FEATURE_ENABLED:
                continue
            kind = _call(nvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
            if kind == codes.NVLINK_DEVICE_TYPE_SWITCH:
                fabric.add(gpu.uuid)
                continue
            remote = _call(nvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            peer = by_bus.get(_bus(remote.busId)) if remote is not None else None
            if peer is not None and peer != gpu.uuid:
                nvlinks[_pair(gpu.uuid, peer)] += 1
    out: list[Link] = []
    for i, (a, ha) in enumerate(gpus):
        for b, hb in gpus[i + 1:]:
            level = _call(nvml.nvmlDeviceGetTopologyCommonAncestor, ha, hb)
            pair = _pair(a.uuid, b.uuid)
            # Each link is seen from both ends: count it once.
            out.append(Link(pair[0], pair[1], codes.TOPOLOGY_NAMES.get(int(level)) if level is not None else None,
                            nvlinks[pair] // 2))
    return out, frozenset(fabric)


def read_numa(nvml: Any, gpus: Sequence[tuple[Gpu, Any]]) -> dict[str, int]:
    """The NUMA node of each GPU where NVML says (`nvmlDeviceGetNumaNodeId`; older bindings lack it,
    older drivers answer "not supported", a machine without NUMA answers a negative number)."""
    fn = getattr(nvml, "nvmlDeviceGetNumaNodeId", None)
    if fn is None:
        return {}
    out: dict[str, int] = {}
    for gpu, handle in gpus:
        value = _call(fn, handle)
        if value is not None and int(value) >= 0:
            out[gpu.uuid] = int(value)
    return out


@dataclass(frozen=True)
class Place:
    """Where one GPU sits, as the device plugin publishes it."""

    numa: int | None
    switch: int | None
    """The PCIe switch, numbered per node in GPU order; None where no common ancestor was read."""
    nvswitch: bool
    peers: tuple[tuple[str, int], ...]
    """(GPU UUID, direct NVLinks), sorted."""


def places(inventory: Inventory) -> dict[str, Place]:
    """Per GPU of the inventory: its NUMA node (NVML's, or else the GPUs that reach each other without
    crossing sockets numbered as one), its PCIe switch (GPUs whose common ancestor is one switch or one
    board), NVSwitch membership and NVLink peers. Only GPUs that took part in the link read appear."""
    uuids = sorted({u for link in inventory.links for u in (link.gpu_a, link.gpu_b)}
                   | {g.uuid for g in inventory.gpus if g.nvswitch or g.numa_node is not None})
    known = {link.gpu_a for link in inventory.links if link.pcie} | {link.gpu_b for link in inventory.links
                                                                     if link.pcie}
    order = [g.uuid for g in inventory.gpus if g.uuid in set(uuids)]
    switch = _components(order, ((link.gpu_a, link.gpu_b) for link in inventory.links if link.pcie in SAME_SWITCH))
    socket = _components(order, ((link.gpu_a, link.gpu_b) for link in inventory.links
                                 if link.pcie is not None and link.pcie != ACROSS_SOCKETS))
    peers: dict[str, list[tuple[str, int]]] = {u: [] for u in order}
    for link in inventory.links:
        if link.nvlinks > 0:
            peers[link.gpu_a].append((link.gpu_b, link.nvlinks))
            peers[link.gpu_b].append((link.gpu_a, link.nvlinks))
    out: dict[str, Place] = {}
    alone = len(order) == 1
    for gpu in inventory.gpus:
        if gpu.uuid not in peers:
            continue
        numa = gpu.numa_node if gpu.numa_node is not None else (socket[gpu.uuid] if gpu.uuid in known or alone
                                                                else None)
        out[gpu.uuid] = Place(numa, switch[gpu.uuid] if gpu.uuid in known or alone else None, gpu.nvswitch,
                              tuple(sorted(peers[gpu.uuid])))
    return out


def _components(order: Sequence[str], edges: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Connected components numbered 0, 1, ... in the order their first GPU appears."""
    parent = {u: u for u in order}

    def root(u: str) -> str:
        while parent[u] != u:
            parent[u] = parent[parent[u]]
            u = parent[u]
        return u

    for a, b in edges:
        if a in parent and b in parent:
            ra, rb = root(a), root(b)
            if ra != rb:
                parent[max(ra, rb, key=order.index)] = min(ra, rb, key=order.index)
    number: dict[str, int] = {}
    out: dict[str, int] = {}
    for u in order:
        out[u] = number.setdefault(root(u), len(number))
    return out


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)
