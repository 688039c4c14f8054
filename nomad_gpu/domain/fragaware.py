"""Our default policy: fragmentation-aware placement for whole GPUs, shares and MIG alike.

(first version; refined below)
"""

from __future__ import annotations

from nomad_gpu.domain.fragmentation import Demand
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import MILLI_PER_GPU
from nomad_gpu.domain.requests import AllocAsk, MigSlices
from nomad_gpu.domain.scoring import BasePolicy, Option, gpu_state_after, left_after


class FragAware(BasePolicy):
    name = "frag-aware"

    def score(self, nf: NodeFree, ask: AllocAsk, opt: Option, demand: Demand | None) -> float:
        best_fit = -float(left_after(nf, ask, opt)) / (MILLI_PER_GPU * 64)
        if demand is None or not demand.shapes or isinstance(ask.gpu, MigSlices):
            return best_fit
        before = demand.fragmentation(nf)
        after = demand.fragmentation_of(gpu_state_after(nf, opt), nf.cpu_free - ask.cpu_mhz)
        return -(after - before) + best_fit
