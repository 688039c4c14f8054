"""The FGD paper's baseline policies, scored exactly as its simulator scores them.

Weng et al. (USENIX ATC '23) compare FGD with Random and BestFit on Alibaba's openb trace, in a
Kubernetes scheduler simulator (hkust-adsl/kubernetes-scheduler-simulator). Pairing our own policy
with theirs only means something if these three behave as theirs do, down to the integer
truncation of scores and the ties it creates, because ties go to the node priority and that
decides a great deal. So:

- `best-fit`: `int((1 - (0.5 (cpu_left - cpu) / MAX_CPU + 0.5 (gpu_left - gpu) / MAX_GPU)) * 100)`
  per node (memory unused), min-max normalised across the candidates with integer division; inside
  the node, the sufficient GPU with the least free milli.
- `fgd`: `int(sigmoid((F_before - F_after) / 1000) * 100)`, not normalised, where F is the node's
  fragmentation under the typical demand (`fragmentation.Demand`); a share tries every GPU with
  room and the node scores its best one (the lowest device on equal integer scores).
- `random`: a uniformly chosen feasible node; a share goes to a uniformly chosen GPU with room.

They work on any inventory (MIG asks included: there they fall back to neutral scores), so the
service can run them too.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from nomad_gpu.domain.fragmentation import Demand
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import MILLI_PER_GPU
from nomad_gpu.domain.requests import AllocAsk
from nomad_gpu.domain.scoring import BasePolicy, Option, gpu_state_after, prefer_tight
from nomad_gpu.domain.units import SLICES_DEFAULT, parent_slices_for_model

MAX_SPEC_CPU_MHZ = 128_000
"""The paper's CPU normaliser: the largest node's CPU (milli-cores in the trace, MHz here)."""
MAX_SPEC_GPU_MILLI = 8_000
"""The paper's GPU normaliser: the largest node's GPUs, in milli-GPU."""
MAX_NODE_SCORE = 100


def sigmoid(x: float) -> float:
    if x < -700.0:  # exp would overflow; the value is 0 to double precision anyway
        return 0.0
    return 1.0 / (1.0 + math.exp(-x))


def fgd_delta(nf: NodeFree, ask: AllocAsk, opt: Option, demand: Demand) -> float:
    """F before minus F after placing `ask` as `opt` (positive: the placement reduces fragmentation)."""
    before = demand.fragmentation(nf)
    after = demand.fragmentation_of(gpu_state_after(nf, opt), nf.cpu_free - ask.cpu_mhz)
    return before - after


def fgd_int_score(delta: float) -> int:
    """The paper's truncated FGD score of a fragmentation delta."""
    return int(sigmoid(delta / 1000) * float(MAX_NODE_SCORE))


def gpu_free_milli(nf: NodeFree) -> int:
    """Free GPU capacity of a node in milli-GPU: GPUs and shares by milli, MIG instances by slices."""
    total = sum(nf.gpu_free.values())
    for name, ids in nf.mig_free.items():
        model = name.rpartition(" MIG ")[0]
        slices = parent_slices_for_model(model) or SLICES_DEFAULT
        for iid in ids:
            total += _mig_milli(nf, iid, slices)
    return total


def _mig_milli(nf: NodeFree, iid: object, slices: int) -> int:
    for m in nf.node.migs:
        if m.id == iid:
            return m.profile.compute_slices * MILLI_PER_GPU // slices
    return 0


class BestFit(BasePolicy):
    """The paper's BestFit: least CPU and GPU left on the node, normalised across candidates."""

    name = "best-fit"

    def __init__(self, max_cpu_mhz: int = MAX_SPEC_CPU_MHZ, max_gpu_milli: int = MAX_SPEC_GPU_MILLI) -> None:
        self.max_cpu = float(max_cpu_mhz)
        self.max_gpu = float(max_gpu_milli)

    def score(self, nf: NodeFree, ask: AllocAsk, opt: Option, demand: Demand | None) -> float:
        cpu_left = float(nf.cpu_free) - float(ask.cpu_mhz)
        gpu_left = float(gpu_free_milli(nf)) - float(round(ask.gpu_equivalents * MILLI_PER_GPU))
        waste = 0.0
        waste += cpu_left / self.max_cpu * 0.5
        waste += gpu_left / self.max_gpu * 0.5
        return float(int((1.0 - waste) * float(MAX_NODE_SCORE)))

    def prefer(self, nf: NodeFree, ask: AllocAsk, opt: Option) -> float:
        return prefer_tight(nf, ask, opt)

    def normalise(self, scores: Sequence[float]) -> Sequence[float]:
        lowest, highest = int(min(scores)), int(max(scores))
        span = highest - lowest
        if span == 0:
            return [0.0] * len(scores)
        return [float((int(s) - lowest) * MAX_NODE_SCORE // span) for s in scores]


class Fgd(BasePolicy):
    """The paper's FGD: the truncated sigmoid of the fragmentation the placement removes."""

    name = "fgd"
    uses_demand = True

    def score(self, nf: NodeFree, ask: AllocAsk, opt: Option, demand: Demand | None) -> float:
        if demand is None or not demand.shapes:
            return 0.0
        return float(fgd_int_score(fgd_delta(nf, ask, opt, demand)))


class RandomPick(BasePolicy):
    """The paper's Random: any feasible node, any GPU with room, drawn from a seeded generator."""

    name = "random"
    prefer_pure = False

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    @classmethod
    def create(cls, *, seed: int = 0) -> BasePolicy:
        return cls(seed)

    def score(self, nf: NodeFree, ask: AllocAsk, opt: Option, demand: Demand | None) -> float:
        return 0.0

    def prefer(self, nf: NodeFree, ask: AllocAsk, opt: Option) -> float:
        return self._rng.random()

    def normalise(self, scores: Sequence[float]) -> Sequence[float]:
        out = [0.0] * len(scores)
        out[self._rng.randrange(len(scores))] = 1.0
        return out
