"""Our default policy: fragmentation-aware placement for whole GPUs, shares and MIG alike.

It ranks a placement by four keys, most significant first:

1. FGD's score (`baselines.fgd_int_score`): the sigmoid of the fragmentation the placement
   removes under the typical demand, truncated to an integer as the paper does. The truncation
   matters: it treats gradients within a fraction of a GPU of each other as equal, and scoring
   them in full precision instead packs markedly worse (docs/packing.md).
2. Within such a tie, the room it takes from the demand's *large* shapes (`Demand.large`: every
   multi-GPU shape and every typical shape bound to named GPU models, each weighted by its
   frequency over the room the cluster has left for it, `Demand.scarce_on`): the big, CPU-rich
   nodes that are the only homes of a 120-core 8-GPU task, and the CPU-poor nodes of a scarce
   model, are exactly where the next key sends work (CPU-heavy work to the first; light work to
   the second, to use GPUs a CPU-heavy task would strand), and FGD's own score sends work free to
   run anywhere to the small nodes of scarce models. Weighing by the room *left* spreads that work
   over the scarce models as their room shrinks, instead of filling one until its own tasks find
   none. Absent when the demand has no large shapes (in a queue the cycle keeps only those whose
   room waiting tasks would use up: `Demand.needed_now`).
3. The change in *stranded* capacity (`Demand.stranded`): free GPU that copies of the typical
   tasks could not use once the node's CPU is counted as well as its GPUs. FGD only asks whether
   one more typical task fits; this asks how much of the node's GPU it and its siblings could
   still use, which steers CPU-heavy tasks away from nodes whose GPUs would be left without CPU.
4. Best fit on the asked kind (whole GPUs, MIG instances of the profile, a share's GPU, or CPU for
   CPU-only work), so that with no demand to go on (or for MIG, which F does not model) the
   policy still packs; then the fitter's node priority.

Between keys 3 and 4, for a multi-GPU set on a node that publishes its topology, whether the set is
NVLink-connected (`topochoice.topology_term`; one PCIe switch or NUMA node counts only inside a
node). It decides between nodes the fragmentation keys leave level, so it never undoes their
packing; which GPUs of a node form the set is `topochoice.choose`, and that alone is where most
NVLink sets come from (docs/topology.md). Where no topology is published the term is 0 and nothing
is added, so such fleets place exactly as before.

Inside a node, the GPU with the least room that the share fits is preferred among equals.
The keys are folded into one float, each bounded below the resolution of the one above it (see
the scales below); with large shapes the primary is scaled down to make room for key 2 within
double precision.
"""

from __future__ import annotations

import math

from nomad_gpu.domain import topochoice  # noqa: F401  (installs the whole-GPU kind's topology hooks)
from nomad_gpu.domain.baselines import fgd_delta, fgd_int_score
from nomad_gpu.domain.fragmentation import Demand, gpu_state
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import MILLI_PER_GPU
from nomad_gpu.domain.requests import AllocAsk
from nomad_gpu.domain.scoring import BasePolicy, Option, capacity, gpu_state_after, left_after, prefer_tight

_STRANDED_CAP = 64.0 * MILLI_PER_GPU
"""Stranded deltas are clipped to +-64 GPUs' worth (more GPUs than any node has)."""
_SECONDARY_SCALE = 1e-6
"""Without large shapes: stranded in (-0.065, 0.065), never reaching the primary's unit step."""
_TERTIARY_SCALE = 1e-12
"""Without large shapes: best fit in [-1e-12, 0], below the stranded key's smallest step (typical
weights of 1e-4 times one milli-GPU, scaled: 1e-10) and above double precision at 100 (1.4e-14)."""

_LARGE_CAP = 64.0
"""Lost room for large shapes is clipped at 64 copies of the scarcest one."""
_LARGE_LEVELS = 1000
"""... and counted in 1/1000ths of that (rounded up, so that any loss counts)."""
_PRIMARY_UNIT = 1e-2
"""With large shapes: the integer FGD score in steps of 1e-2 (scores in [0, 1], where double
precision is 2.2e-16, which the keys below need)."""
_LARGE_STEP = 1e-5
"""A level of lost large room: at most 999 levels, 9.99e-3, below the primary's step."""
_STRANDED_FINE = 6.25e-11
"""Stranded, clipped at 64,000 milli: within +-4e-6, below half a large level."""
_FILL_FINE = 5e-15
"""Best fit within [-5e-15, 0], above double precision at 1 (20 steps of it)."""


_TIER_BARE = 1e-11
"""The topology term (0 or 1, `_set_term`) per unit: without a demand, above best fit (in [-1e-12, 0])."""
_TIER_PLAIN = 2e-12
"""... without large shapes, just above best fit (-1e-12 .. 0) and below the stranded key's steps."""
_TIER_LARGE = 1e-14
"""... with large shapes, just above best fit (`_FILL_FINE`: -5e-15 .. 0); a double at 1 resolves 2.2e-16.
Above all keys instead, the term bought 96 % NVLink sets for 8 % longer mean p95 waits at 90 % load
(benchmarks/topology.py `above`, docs/topology.md)."""


def _set_term(nf: NodeFree, ask: AllocAsk, opt: Option) -> float:
    """The asked kind's term for the set an option takes (`WholeKind.set_term`: 1 for an NVLink-connected
    multi-GPU set); 0 for kinds without one, and wherever no topology is published, so that such fleets
    score exactly as before."""
    term = getattr(ask.gpu.kind, "set_term", None) if ask.gpu is not None else None
    return float(term(nf, opt)) if term is not None else 0.0


def _large_level(lost: float) -> int:
    """Lost room for large shapes (`Demand.large_capacity` before minus after) as a level."""
    if lost <= 0.0:
        return 0
    return min(_LARGE_LEVELS - 1, math.ceil(min(lost, _LARGE_CAP) * _LARGE_LEVELS / _LARGE_CAP - 1e-9))


def _fill(nf: NodeFree, ask: AllocAsk, opt: Option) -> float:
    """Best fit: the share of the asked kind's capacity left on the node, 0 (tight) .. 1 (empty)."""
    left = float(left_after(nf, ask, opt))
    whole = float(max(1, capacity(nf, ask)))
    return min(1.0, max(0.0, left / whole))


def fold_large(primary: int, level: int, stranded: float, fill: float) -> float:
    """The four keys as one float that orders as (primary, -level, stranded, -fill) do, for
    primary in 0..100, level in 0..999, stranded within +-`_STRANDED_CAP`, fill in [0, 1]."""
    return primary * _PRIMARY_UNIT - level * _LARGE_STEP + stranded * _STRANDED_FINE - fill * _FILL_FINE


class FragAware(BasePolicy):
    name = "frag-aware"
    uses_demand = True
    uses_large_shapes = True

    def score(self, nf: NodeFree, ask: AllocAsk, opt: Option, demand: Demand | None) -> float:
        fill = _fill(nf, ask, opt)
        tier = _set_term(nf, ask, opt)
        if demand is None or not demand.shapes:
            score = -fill * _TERTIARY_SCALE
            return score + tier * _TIER_BARE if tier else score
        primary = fgd_int_score(fgd_delta(nf, ask, opt, demand))
        state, cpu = gpu_state(nf), nf.cpu_free
        state_after, cpu_after = gpu_state_after(nf, opt), nf.cpu_free - ask.cpu_mhz
        stranded = demand.stranded(state, cpu) - demand.stranded(state_after, cpu_after)
        stranded = max(-_STRANDED_CAP, min(_STRANDED_CAP, stranded))
        if not demand.large:
            score = primary + stranded * _SECONDARY_SCALE - fill * _TERTIARY_SCALE
            return score + tier * _TIER_PLAIN if tier else score
        level = _large_level(demand.large_capacity(state, cpu) - demand.large_capacity(state_after, cpu_after))
        score = fold_large(primary, level, stranded, fill)
        return score + tier * _TIER_LARGE if tier else score

    def prefer(self, nf: NodeFree, ask: AllocAsk, opt: Option) -> float:
        return prefer_tight(nf, ask, opt)
