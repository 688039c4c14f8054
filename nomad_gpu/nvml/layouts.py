"""Realistic fake nodes (8 x A800-80GB on NVSwitch, H100s with a mixed MIG layout, an H200) and a loader.

Names, memory sizes and MIG profiles are what NVML reports on these parts (reference: the MIG user
guide's profile tables; placements are (start, size) in memory slices). `load_layout` reads a named
layout or a JSON file, so that the device plugin can be started on a fake node in tests; nothing on a
real node ever uses it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from nomad_gpu.nvml.fake import FakeGpu, FakeMig, FakeNode, FakeProcess

A800 = "NVIDIA A800-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"


def a800x8() -> FakeNode:
    """An HGX A800 board: 8 GPUs, 8 NVLinks each to the NVSwitch fabric, two NUMA nodes, PCIe switch pairs."""
    buses = ["07", "0F", "47", "4E", "87", "90", "B7", "BD"]
    gpus = tuple(
        FakeGpu(name=A800, memory_mib=81920, bus_id=f"00000000:{bus}:00.0", mig=(False, False),
                utilisation=(0, 0), used_mib=0, numa=i // 4, pcie_switch=i // 2, nvswitch_links=8)
        for i, bus in enumerate(buses))
    busy = replace(gpus[0], utilisation=(97, 61), used_mib=70116,
                   processes=(FakeProcess(4242, 70112),))
    return FakeNode(gpus=(busy, *gpus[1:]), driver_version="535.161.08", cuda_driver_version=12020)


def h100_mig() -> FakeNode:
    """Two H100-80GB joined by NVLink: GPU 0 in MIG mode with a mixed layout
    (2g.20gb@0, 1g.10gb@2, 1g.10gb@3, 3g.40gb@4), GPU 1 whole with MIG supported but off."""
    migs = (
        FakeMig("2g.20gb", 0, 2, 20096, gpu_instance_id=5, used_mib=1024),
        FakeMig("1g.10gb", 2, 1, 9984, gpu_instance_id=11),
        FakeMig("1g.10gb", 3, 1, 9984, gpu_instance_id=12, used_mib=5000),
        FakeMig("3g.40gb", 4, 4, 40448, gpu_instance_id=2, used_mib=30000),
    )
    procs = (FakeProcess(5100, None, 12, 0), FakeProcess(5200, None, 2, 0))
    gpu0 = FakeGpu(name=H100, memory_mib=81559, bus_id="00000000:18:00.0", mig=(True, True), migs=migs,
                   used_mib=36024, processes=procs, nvlink_peers=("00000000:2A:00.0",) * 4)
    gpu1 = FakeGpu(name=H100, memory_mib=81559, bus_id="00000000:2A:00.0", mig=(False, False),
                   utilisation=(3, 1), used_mib=512, nvlink_peers=("00000000:18:00.0",) * 4)
    return FakeNode(gpus=(gpu0, gpu1))


def h100_mig_pair() -> FakeNode:
    """Two H100-80GB in MIG mode, each 3g.40gb@0 + 1g.10gb@4, @5, @6 (the MIG re-layout example): both
    3g busy, and on GPU 0 the 1g at slice 4 busy too; GPU 1's three 1g are idle."""
    def migs() -> tuple[FakeMig, ...]:
        return (FakeMig("3g.40gb", 0, 4, 40448, gpu_instance_id=2, used_mib=30000),
                *(FakeMig("1g.10gb", s, 1, 9984, gpu_instance_id=7 + s) for s in (4, 5, 6)))
    gpu0 = FakeGpu(name=H100, memory_mib=81559, bus_id="00000000:18:00.0", mig=(True, True), migs=migs(),
                   processes=(FakeProcess(6100, None, 2, 0), FakeProcess(6200, None, 11, 0)))
    gpu1 = FakeGpu(name=H100, memory_mib=81559, bus_id="00000000:2A:00.0", mig=(True, True), migs=migs(),
                   processes=(FakeProcess(6300, None, 2, 0),))
    return FakeNode(gpus=(gpu0, gpu1))


def h200() -> FakeNode:
    """One H200-141GB, MIG supported but off, idle."""
    return FakeNode(gpus=(FakeGpu(name=H200, memory_mib=143771, bus_id="00000000:19:00.0", mig=(False, False),
                                  utilisation=(0, 0), used_mib=0),),
                    driver_version="560.35.03", cuda_driver_version=12060)


def no_driver() -> FakeNode:
    return FakeNode(gpus=(), init_error=12)


LAYOUTS: dict[str, Callable[[], FakeNode]] = {
    "a800x8": a800x8, "h100-mig": h100_mig, "h100-mig-pair": h100_mig_pair, "h200": h200, "no-driver": no_driver,
}


def load_layout(source: str) -> FakeNode:
    """A named layout (`a800x8`, `h100-mig`, `h100-mig-pair`, `h200`, `no-driver`) or a JSON file describing one.

    JSON: `{"layout": "<name>", "lost": [gpu index], "xids": {"<gpu index>": [code]}}` to alter a named
    layout, or `{"gpus": [{FakeGpu fields, "migs": [...], "processes": [...]}], ...}` for a new one.
    """
    if source in LAYOUTS:
        return LAYOUTS[source]()
    path = Path(source)
    if not path.is_file():
        raise ValueError(f"no fake NVML layout {source!r}: give one of {', '.join(LAYOUTS)} or a JSON file")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{source}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"{source}: a fake layout is a JSON object")
    return layout_from_dict(raw)


def layout_from_dict(raw: Mapping[str, Any]) -> FakeNode:
    try:
        if "layout" in raw:
            node = LAYOUTS[str(raw["layout"])]()
        else:
            node = FakeNode(gpus=tuple(_gpu(g) for g in raw["gpus"]),
                            **{k: raw[k] for k in ("driver_version", "cuda_driver_version", "init_error") if k in raw})
        gpus = list(node.gpus)
        for i in raw.get("lost", []):
            gpus[int(i)] = replace(gpus[int(i)], lost=True)
        for i, xids in dict(raw.get("xids", {})).items():
            gpus[int(i)] = replace(gpus[int(i)], xids=tuple(int(x) for x in xids))
        return replace(node, gpus=tuple(gpus))
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        raise ValueError(f"bad fake NVML layout: {exc!r}") from exc


def _gpu(raw: Mapping[str, Any]) -> FakeGpu:
    fields = dict(raw)
    fields["migs"] = tuple(FakeMig(**m) for m in fields.get("migs", ()))
    fields["processes"] = tuple(FakeProcess(**p) for p in fields.get("processes", ()))
    for key in ("mig", "utilisation", "nvlink_peers", "xids"):
        if fields.get(key) is not None:
            fields[key] = tuple(fields[key])
    return FakeGpu(**fields)
