"""The rows of `nomad-gpu inventory`: per node, per MIG-partitioned GPU, and with `--devices` per device.

A GPU cluster is read device by device: which GPU is free, which MIG instance is taken and by whom, how
much of a shared GPU its tenants use. Capacity is also summed in GPU-equivalents (DESIGN 3.3: a whole GPU
is 1, a MIG instance its compute slices over 7, a share its milli over 1000), the unit of quotas.

Nomad lists each MIG instance as its own device; which instances are slices of one physical GPU is said
only by their shared PCI bus ID (the service's `mig_gpus`). :func:`mig_picture` draws such a GPU as its
compute slices, one letter per entry that holds an instance, so "which slices are used, by whom" reads
in one line: `[aaa|bb|.|-]` is a 3g instance held by entry a, a 2g by b, a free 1g and one slice not
partitioned. Instances whose bus ID Nomad did not report are listed one by one, as before.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any

from nomad_gpu.api.payloads import GpuView, Holder, MigGpu, MigView, NodeView
from nomad_gpu.cli.output import Column
from nomad_gpu.cli.queueview import short_model

NODE_COLUMNS = (Column("NODE"), Column("STATUS"), Column("GPUS FREE", right=True), Column("MIG FREE", right=True),
                Column("SHARES FREE", right=True), Column("GPU-EQ FREE", right=True),
                Column("CPU GHZ FREE", right=True), Column("MEM GIB FREE", right=True))
DEVICE_COLUMNS = (Column("NODE"), Column("DEVICE"), Column("KIND"), Column("MODEL"), Column("USE"),
                  Column("HELD BY", shrink=True))
MIG_COLUMNS = (Column("NODE"), Column("GPU (PCI BUS)"), Column("MODEL"), Column("SLICES"),
               Column("FREE", right=True), Column("HELD BY", shrink=True))
TOPOLOGY_COLUMNS = (Column("NODE"), Column("NVLINK GROUPS"), Column("NUMA NODES", shrink=True))

FREE, UNHEALTHY, UNPARTITIONED = ".", "x", "-"
LETTERS = "abcdefghijklmnopqrstuvwxyz"
_SLICES = re.compile(r"^(\d+)g\.")


def mig_equivalents(profile: str) -> float:
    """`3g.40gb` -> 3/7 of a GPU (compute slices over the 7 of a full GPU)."""
    m = _SLICES.match(profile or "")
    return int(m.group(1)) / 7 if m else 0.0


def _slices(m: MigView) -> int:
    """An instance's compute slices (older services send only the profile)."""
    return m.compute_slices or round(mig_equivalents(m.profile) * 7)


def free_equivalents(node: NodeView) -> float:
    whole = sum(1.0 for g in node.gpus if g.mode == "whole" and g.healthy and g.free_milli >= 1000)
    shared = sum(g.free_milli / 1000 for g in node.gpus if g.mode != "whole" and g.healthy)
    migs = sum(mig_equivalents(m.profile) for m in node.migs if m.free and m.healthy)
    return whole + shared + migs


def node_row(n: NodeView) -> tuple[Any, ...]:
    whole = [g for g in n.gpus if g.mode == "whole"]
    shared = [g for g in n.gpus if g.mode != "whole"]
    return (n.name or n.id, n.status + ("" if n.schedulable else " (unschedulable)"),
            f"{sum(g.free_milli == 1000 for g in whole)}/{len(whole)}",
            f"{sum(m.free for m in n.migs)}/{len(n.migs)}",
            f"{sum(g.free_milli for g in shared)}/{1000 * len(shared)}m", f"{free_equivalents(n):.2f}",
            f"{n.cpu_free / 1000:g}/{n.cpu_mhz / 1000:g}",
            f"{n.memory_free // 1024}/{n.memory_mb // 1024}")


def _who(h: Holder) -> str:
    return h.entry or "another team"


def _held_by(holders: Iterable[Holder]) -> str:
    parts = []
    for h in holders:
        parts.append(f"{_who(h)} ({h.milli}m)" if h.milli != 1000 else _who(h))
    return ", ".join(parts)


def mig_picture(gpu: MigGpu, migs: Iterable[MigView]) -> tuple[str, str]:
    """The GPU's compute slices as `[aaa|bb|.|-]` and the legend `a q000003, b q000007`.

    One segment per instance in the node's order, as wide as its compute slices: the letter of the entry
    that holds it, `.` free, `x` unhealthy; `-` for slices no instance was made of."""
    by_id = {m.id: m for m in migs}
    letters: dict[str, str] = {}
    segments = []
    used = 0
    for iid in gpu.instances:
        m = by_id.get(iid)
        if m is None:
            continue
        width = _slices(m)
        used += width
        if m.holders:
            who = _who(m.holders[0])
            mark = letters.setdefault(who, LETTERS[len(letters) % len(LETTERS)])
        else:
            mark = FREE if m.healthy else UNHEALTHY
        segments.append(mark * width)
    if gpu.slices > used:
        segments.append(UNPARTITIONED * (gpu.slices - used))
    legend = ", ".join(f"{mark} {who}" for who, mark in letters.items())
    return f"[{'|'.join(segments)}]", legend


def mig_rows(n: NodeView) -> list[tuple[Any, ...]]:
    """One row per MIG-partitioned GPU of the node: its picture, its free compute slices and who holds it."""
    rows: list[tuple[Any, ...]] = []
    for gpu in n.mig_gpus:
        picture, legend = mig_picture(gpu, n.migs)
        rows.append((n.name or n.id, gpu.pci_bus_id, short_model(gpu.model), picture,
                     f"{gpu.free_slices}/{gpu.slices}", legend))
    return rows


def device_rows(n: NodeView) -> list[tuple[Any, ...]]:
    """One row per GPU and MIG instance: whole GPUs free/used, shared GPUs by milli in use, MIG instances
    with their profile (as a bar of its compute slices: `###....` is 3g of 7). A MIG-partitioned GPU whose
    bus ID is known leads its instances with a row of its own, its slices drawn as `mig_picture` draws them."""
    node = n.name or n.id
    rows: list[tuple[Any, ...]] = []
    for g in n.gpus:
        if not g.healthy:
            use = unhealthy_text(g.unhealthy_since)
        elif g.mode == "whole":
            use = "free" if g.free_milli >= 1000 else "used"
        else:
            use = f"{1000 - g.free_milli}/1000m"
        rows.append((node, g.id, _gpu_kind(n, g), short_model(g.model), use, _held_by(g.holders)))
    by_id = {m.id: m for m in n.migs}
    grouped = {iid for gpu in n.mig_gpus for iid in gpu.instances}
    for gpu in n.mig_gpus:
        picture, legend = mig_picture(gpu, n.migs)
        rows.append((node, gpu.pci_bus_id, f"mig {picture}", short_model(gpu.model),
                     f"{gpu.free_slices}/{gpu.slices} free", legend))
        rows.extend(_mig_row(node, by_id[iid]) for iid in gpu.instances if iid in by_id)
    rows.extend(_mig_row(node, m) for m in n.migs if m.id not in grouped)
    return rows


def _mig_row(node: str, m: MigView) -> tuple[Any, ...]:
    slices = _slices(m)
    bar = "#" * slices + "." * (7 - slices)
    use = unhealthy_text(m.unhealthy_since) if not m.healthy else ("free" if m.free else "used")
    return (node, m.id, f"mig {m.profile} {bar}", short_model(m.device.split(" MIG ")[0]), use, _held_by(m.holders))


def unhealthy_text(since: float | None) -> str:
    """`unhealthy`, with the UTC time the service first saw it so where known: `unhealthy since 07:01Z`."""
    return "unhealthy" if since is None else time.strftime("unhealthy since %H:%MZ", time.gmtime(since))


def _gpu_kind(n: NodeView, g: GpuView) -> str:
    """`gpu`, or on a node that publishes its topology `gpu nvlink b numa 1`: the letter names its NVLink
    group in `topology_rows`."""
    if g.mode != "whole":
        return "shared"
    if not n.topology:
        return "gpu"
    kind = "gpu"
    if g.nvlink_group is not None:
        kind += f" nvlink {_group_letter(g.nvlink_group)}"
    if g.numa_node is not None:
        kind += f" numa {g.numa_node}"
    return kind


def _group_letter(k: int) -> str:
    return LETTERS[k] if k < len(LETTERS) else str(k)


def topology_rows(n: NodeView) -> list[tuple[Any, ...]]:
    """One row per node with whole GPUs: its NVLink groups (`a 2 GPUs, b 2 GPUs`) and its GPUs per NUMA
    node (`0: 4 GPUs, 1: 4 GPUs`); a node whose device plugin publishes no topology (the stock plugin)
    says its topology is unknown (it may have NVLink; nobody said)."""
    whole = [g for g in n.gpus if g.mode == "whole"]
    if not whole:
        return []
    node = n.name or n.id
    if not n.topology:
        return [(node, "topology unknown (not published)", "-")]
    groups = ", ".join(f"{_group_letter(k)} {len(members)} GPUs" for k, members in enumerate(n.nvlink_groups))
    numa: dict[int, int] = {}
    for g in whole:
        if g.numa_node is not None:
            numa[g.numa_node] = numa.get(g.numa_node, 0) + 1
    return [(node, groups or "none", ", ".join(f"{k}: {c} GPUs" for k, c in sorted(numa.items())) or "-")]
