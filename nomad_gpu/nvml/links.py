"""How the GPUs of a node reach each other: PCIe distance per pair and NVLink, read from NVML.

Cheap enough to read on every inventory (n^2/2 topology calls and at most 18 link probes per GPU), and
only ever on physical GPUs: MIG devices have no peer-to-peer at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from nomad_gpu.nvml import codes
from nomad_gpu.nvml.model import Gpu, Link


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


def read_links(nvml: Any, gpus: Sequence[tuple[Gpu, Any]]) -> tuple[list[Link], bool]:
    """Links between every pair of readable GPUs, and whether any GPU hangs on an NVSwitch fabric."""
    by_bus = {_bus(g.pci_bus_id): g.uuid for g, _ in gpus if g.pci_bus_id}
    nvlinks: Counter[tuple[str, str]] = Counter()
    nvswitch = False
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
                nvswitch = True
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
    return out, nvswitch


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)
