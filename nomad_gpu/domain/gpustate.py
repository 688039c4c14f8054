"""A node's GPUs reduced to what fragmentation depends on: (model, kind, free milli) per GPU.

It exists apart from `fragmentation.py` because the F measure, the room for large shapes
(`largeshapes.py`) and the scores (`scoring.py`) all key their memos on this state.
"""

from __future__ import annotations

from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.inventory import Gpu, GpuMode

GpuState = tuple[tuple[str, int, int], ...]
"""A node's GPUs as (model, kind, free milli) in device order, kind a bit set of `TAKES_WHOLE` and
`TAKES_SHARES`: all that F depends on besides CPU."""

TAKES_WHOLE, TAKES_SHARES = 1, 2


def gpu_kind(gpu: Gpu) -> int:
    mode = gpu.mode
    if mode is GpuMode.FLEX:
        return TAKES_WHOLE | TAKES_SHARES
    return TAKES_WHOLE if mode is GpuMode.WHOLE else TAKES_SHARES


def gpu_state(nf: NodeFree, taken: dict[object, int] | None = None) -> GpuState:
    """`nf`'s GPU state, less `taken` milli per GPU id (a placement being considered)."""
    if taken:
        free = nf.gpu_free
        return tuple((model, kind, free[gid] - taken.get(gid, 0)) for gid, model, kind in nf.layout())
    return nf.gpu_state()
