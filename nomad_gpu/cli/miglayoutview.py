"""`nomad-gpu inventory --devices`: each MIG GPU drawn by placement, as its 8 memory slices.

Which profile fits on a MIG GPU depends on where its instances sit, not on how many slices are free: a
3g.40gb needs slices 0-3 or 4-7 free. So a GPU whose device plugin publishes placements (the project's
plugin) is drawn slice by slice, one row per physical GPU, left to right:

    GPU-1a2b3c4d  [3g.40gb*__________][1g_][1g_][1g_].....

each slice is 5 characters wide; an instance is a bracket as wide as its memory slices, `*` marks one in
use (any holder, ours or another team's), `x` an unhealthy one, `~` an idle one a re-layout in progress
replaces (the service withholds it meanwhile), `.....` a slice no instance covers. No
blank inside the bar, so it keeps its shape in the tab-separated output a pipe gets. A re-layout the service is
making of that GPU is named beside it (`re-layout in progress: 3g.40gb@4`, the instances it creates).
A node whose plugin publishes no placements (the stock NVIDIA plugin) says its layout is not known.
"""

from __future__ import annotations

from typing import Any

from nomad_gpu.api.payloads import MigGpu, MigView, NodeView
from nomad_gpu.cli.output import Column
from nomad_gpu.cli.queueview import short_model

LAYOUT_COLUMNS = (Column("NODE"), Column("GPU"), Column("MODEL"), Column("SLICES BY PLACEMENT (0-7)"),
                  Column("IN USE", shrink=True), Column("RE-LAYOUT", shrink=True))
SLICE_WIDTH = 5
BUSY, UNHEALTHY, RELAYING, UNCOVERED, FILL = "*", "x", "~", "." * SLICE_WIDTH, "_"
NOT_KNOWN = "layout not known: the node's device plugin publishes no placements"


def short_gpu(uuid: str) -> str:
    """`GPU-1a2b3c4d-...` -> `GPU-1a2b3c4d`: enough to tell a node's GPUs apart; --json has the whole UUID."""
    head, _, rest = uuid.partition("-")
    return f"{head}-{rest[:8]}" if rest else uuid


def _busy(m: MigView) -> bool:
    return bool(m.holders)


def _segment(m: MigView, size: int, relaying: bool) -> str:
    inner = SLICE_WIDTH * size - 2
    mark = RELAYING if relaying else UNHEALTHY if not m.healthy else BUSY if _busy(m) else ""
    label = m.profile if len(m.profile) + len(mark) <= inner else m.profile.split(".")[0]
    return "[" + (label + mark)[:inner].ljust(inner, FILL) + "]"


def layout_bar(gpu: MigGpu, migs: list[MigView]) -> str:
    """The GPU's memory slices left to right, each instance at its placement (see the module's doc)."""
    by_id = {m.id: m for m in migs}
    relaying = set(gpu.relayout.destroys) if gpu.relayout is not None else set()
    placed = sorted(((m.start, m.memory_slices or 1, m) for iid in gpu.instances
                     if (m := by_id.get(iid)) is not None and m.start is not None), key=lambda t: t[0])
    out, at = [], 0
    for start, size, m in placed:
        if start < at:  # overlapping placements cannot be: draw what the plugin said, in order
            start = at
        out.append(UNCOVERED * (start - at))
        out.append(_segment(m, size, m.id in relaying))
        at = start + size
    out.append(UNCOVERED * max(0, gpu.memory_slices - at))
    return "".join(out)


def _in_use(gpu: MigGpu, migs: list[MigView]) -> str:
    by_id = {m.id: m for m in migs}
    parts = []
    for iid in gpu.instances:
        m = by_id.get(iid)
        if m is not None and _busy(m):
            who = ", ".join(h.entry or "another team" for h in m.holders)
            parts.append(f"{m.profile}@{m.start} {who}")
    return "; ".join(parts)


def relayout_text(gpu: MigGpu) -> str:
    r = gpu.relayout
    if r is None:
        return ""
    creates = ",".join(r.creates) or ",".join(r.layout)
    return f"re-layout in progress: {creates}" + (f" ({r.phase})" if r.phase else "")


def layout_rows(n: NodeView) -> list[tuple[Any, ...]]:
    """One row per physical MIG GPU of the node whose placements are published, in the order of their
    UUIDs; one row for the node's MIG instances whose placements are not."""
    node = n.name or n.id
    migs = list(n.migs)
    rows: list[tuple[Any, ...]] = []
    placed = sorted((g for g in n.mig_gpus if g.uuid), key=lambda g: g.uuid or "")
    for gpu in placed:
        rows.append((node, short_gpu(gpu.uuid or ""), short_model(gpu.model), layout_bar(gpu, migs),
                     _in_use(gpu, migs), relayout_text(gpu)))
    unplaced = [m for m in migs if m.start is None]
    if unplaced:
        models = sorted({short_model(m.device.split(" MIG ")[0]) for m in unplaced})
        rows.append((node, "-", ", ".join(models), NOT_KNOWN, f"{sum(_busy(m) for m in unplaced)} of "
                     f"{len(unplaced)} instances", ""))
    return rows
