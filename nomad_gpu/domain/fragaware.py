"""Our default policy: fragmentation-aware placement for whole GPUs, shares and MIG alike.

It ranks a placement by three keys, most significant first:

1. FGD's score (`baselines.fgd_int_score`): the sigmoid of the fragmentation the placement
   removes under the typical demand, truncated to an integer as the paper does. The truncation
   matters: it treats gradients within a fraction of a GPU of each other as equal, and scoring
   them in full precision instead packs markedly worse (docs/packing.md).
2. Within such a tie, where FGD falls back on an arbitrary node order, the change in *stranded*
   capacity (`Demand.stranded`): free GPU that copies of the typical tasks could not use once
   the node's CPU is counted as well as its GPUs. FGD only asks whether one more typical task
   fits; this asks how much of the node's GPU it and its siblings could still use, which steers
   CPU-heavy tasks away from nodes whose GPUs would be left without CPU to run beside them.
3. Best fit on the asked kind (whole GPUs, MIG instances of the profile, a share's GPU, or CPU for
   CPU-only work), so that with no demand to go on (or for MIG, which F does not model) the
   policy still packs; then the fitter's node priority.

Inside a node, the GPU with the least room that the share fits is preferred among equals.
The keys are folded into one float (see `_SECONDARY_SCALE`, `_TERTIARY_SCALE`): the primary is an
integer, the secondary is bounded well below 1, the tertiary below the secondary's resolution.
"""

from __future__ import annotations

from nomad_gpu.domain.baselines import fgd_delta, fgd_int_score
from nomad_gpu.domain.fragmentation import Demand, gpu_state
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import MILLI_PER_GPU
from nomad_gpu.domain.requests import AllocAsk, GpuShare, MigSlices, WholeGpus
from nomad_gpu.domain.scoring import BasePolicy, Option, gpu_state_after, left_after

_STRANDED_CAP = 64.0 * MILLI_PER_GPU
"""Stranded deltas are clipped to +-64 GPUs' worth (more GPUs than any node has)."""
_SECONDARY_SCALE = 1e-6
"""Secondary in (-0.065, 0.065): it never reaches the primary's unit step."""
_TERTIARY_SCALE = 1e-12
"""Tertiary in [-1e-12, 0]: below the secondary's smallest step (typical weights of 1e-4 times one
milli-GPU, scaled: 1e-10) and above double precision at 100 (1.4e-14)."""


def _fill(nf: NodeFree, ask: AllocAsk, opt: Option) -> float:
    """Best fit: the share of the asked kind's capacity left on the node, 0 (tight) .. 1 (empty)."""
    left = float(left_after(nf, ask, opt))
    g = ask.gpu
    if isinstance(g, GpuShare):
        whole = float(MILLI_PER_GPU)
    elif isinstance(g, WholeGpus):
        whole = float(max(1, sum(1 for gpu in nf.gpus.values() if gpu.mode.takes_whole)))
    elif isinstance(g, MigSlices):
        whole = float(max(1, len(nf.node.migs)))
    else:
        whole = float(max(1, nf.node.cpu_mhz))
    return min(1.0, max(0.0, left / whole))


class FragAware(BasePolicy):
    name = "frag-aware"
    uses_demand = True

    def score(self, nf: NodeFree, ask: AllocAsk, opt: Option, demand: Demand | None) -> float:
        tertiary = -_fill(nf, ask, opt) * _TERTIARY_SCALE
        if demand is None or not demand.shapes:
            return tertiary
        primary = fgd_int_score(fgd_delta(nf, ask, opt, demand))
        before = demand.stranded(gpu_state(nf), nf.cpu_free)
        after = demand.stranded(gpu_state_after(nf, opt), nf.cpu_free - ask.cpu_mhz)
        secondary = max(-_STRANDED_CAP, min(_STRANDED_CAP, before - after)) * _SECONDARY_SCALE
        return primary + secondary + tertiary

    def prefer(self, nf: NodeFree, ask: AllocAsk, opt: Option) -> float:
        if isinstance(ask.gpu, GpuShare):
            return -float(nf.gpu_free[opt.shared_gpu])
        return 0.0
