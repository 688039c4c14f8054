"""What a placement policy sees and returns: options on a node, the `Policy` contract, and how a
node's score and best option follow from them (`best_score`, `best_option`, `ScoreMemo`).

Split from `policies` (the registry) so that policy modules (`baselines`, `fragaware`) can build on
it without importing the registry that lists them, and from `fit` so that the fitter keeps to
candidates and verdicts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Protocol

from nomad_gpu.domain.fragmentation import Demand, GpuState, gpu_state
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import MILLI_PER_GPU
from nomad_gpu.domain.kinds import Option
from nomad_gpu.domain.kinds.share import share_cost
from nomad_gpu.domain.requests import AllocAsk

__all__ = ["BasePolicy", "Option", "Policy", "ScoreMemo", "best_option", "best_option_at", "best_score", "capacity",
           "gpu_state_after", "left_after", "option_at", "options", "prefer_tight", "share_cost"]


def options(nf: NodeFree, ask: AllocAsk) -> Iterator[Option]:
    """Every GPU-feasible way to host `ask` on `nf` (CPU and memory are checked elsewhere): its kind's
    options (`GpuAsk.options`), or the one empty option of CPU-only work."""
    g = ask.gpu
    if g is None:
        return iter((_CPU_ONLY,))
    return g.options(nf)


_CPU_ONLY = Option()


def gpu_state_after(nf: NodeFree, opt: Option) -> GpuState:
    """The node's GPU state tuple (as `Demand` memoises it) once `opt` is committed."""
    if opt.share_milli:
        gid = opt.shared_gpu
        return gpu_state(nf, {gid: share_cost(nf, gid, opt.share_milli)})
    return gpu_state(nf, {i: MILLI_PER_GPU for i in opt.instance_ids if i in nf.gpus})


def left_after(nf: NodeFree, ask: AllocAsk, opt: Option) -> int:
    """Free capacity of the asked kind left on the node (whole GPUs, MIG instances, share milli; CPU
    for CPU-only work)."""
    g = ask.gpu
    if g is None:
        return nf.cpu_free - ask.cpu_mhz
    return g.left_after(nf, opt)


def capacity(nf: NodeFree, ask: AllocAsk) -> int:
    """The node's capacity of the asked kind (CPU for CPU-only work): best fit's denominator."""
    g = ask.gpu
    return nf.node.cpu_mhz if g is None else g.capacity(nf)


def prefer_tight(nf: NodeFree, ask: AllocAsk, opt: Option) -> float:
    """The asked kind's preference among a node's equally scored options (`GpuAsk.prefer_tight`)."""
    g = ask.gpu
    return 0.0 if g is None else g.prefer_tight(nf, opt)


class Policy(Protocol):
    name: str
    exhaustive: bool
    """True: the fitter must offer every node in rank order (first-fit); False: a few per shape."""
    pure: bool
    """True: `score` depends only on the node's free state, the ask and the demand, so the fitter
    may memoise it per node state (`prefer` and `normalise` may still draw from a seeded source)."""
    uses_demand: bool
    """True: scores depend on the typical demand (`Demand`); a caller without one should build it."""
    uses_large_shapes: bool
    """True: scores depend on the demand's large shapes and their weights (`Demand.large`), which
    follow the cluster's room for them (`Demand.scarce_on`): a caller keeping a demand across
    placements should re-weigh it as the room changes."""
    prefer_pure: bool
    """True: `prefer` depends only on the node's free state and the ask (it draws nothing), so a
    pure policy's choice among a node's options may be memoised per node state too."""

    def score(self, nf: NodeFree, ask: AllocAsk, opt: Option, demand: Demand | None) -> float:
        """Higher is better."""
        ...

    def prefer(self, nf: NodeFree, ask: AllocAsk, opt: Option) -> float:
        """Among a node's options with equal score, higher is taken (then device order)."""
        ...

    def normalise(self, scores: Sequence[float]) -> Sequence[float]:
        """Node scores as compared across all candidates of one ask (the identity by default)."""
        ...


class BasePolicy:
    """Defaults for the optional hooks of `Policy`."""

    name = "base"
    exhaustive = False
    pure = True
    uses_demand = False
    uses_large_shapes = False
    prefer_pure = True

    @classmethod
    def create(cls, *, seed: int = 0) -> BasePolicy:
        """A fresh instance; policies that draw at random take `seed`, the others ignore it."""
        return cls()

    def score(self, nf: NodeFree, ask: AllocAsk, opt: Option, demand: Demand | None) -> float:
        raise NotImplementedError

    def prefer(self, nf: NodeFree, ask: AllocAsk, opt: Option) -> float:
        return 0.0

    def normalise(self, scores: Sequence[float]) -> Sequence[float]:
        return scores


class ScoreMemo:
    """(ask, node free state) -> the node's score (`best_score`) for a policy whose `pure` is set.

    Two nodes in the same free state score the same, whichever node they are, so a long run
    scores each state once per ask shape instead of once per node per decision."""

    LIMIT = 1_000_000

    def __init__(self) -> None:
        self._tables: dict[tuple[int, int, object], dict[str, float | None]] = {}
        self._choices: dict[tuple[int, int, object], dict[tuple[str, int, int], int]] = {}
        self._size = 0

    def table(self, ask: AllocAsk) -> dict[str, float | None]:
        """The memo for one ask shape, keyed by `NodeFree.signature()`."""
        if self._size >= self.LIMIT:
            self._tables.clear()
            self._choices.clear()
            self._size = 0
        key = (ask.cpu_mhz, ask.memory_mb, ask.gpu)
        found = self._tables.get(key)
        if found is None:
            found = self._tables[key] = {}
        return found

    def choices(self, ask: AllocAsk) -> dict[tuple[str, int, int], int]:
        """For one ask shape: (signature, node CPU, node MIG count) -> the position of the node's best
        option among `options()`. Nodes in one state list their options alike, so the position
        carries over; the node's totals join the key because best fit divides by them."""
        if self._size >= self.LIMIT:
            self._tables.clear()
            self._choices.clear()
            self._size = 0
        key = (ask.cpu_mhz, ask.memory_mb, ask.gpu)
        found = self._choices.get(key)
        if found is None:
            found = self._choices[key] = {}
        return found

    def note(self, added: int) -> None:
        self._size += added


def best_score(policy: Policy, nf: NodeFree, ask: AllocAsk, demand: Demand | None) -> float | None:
    """The node's score for `ask`: the best over its options; None when it has no GPU option."""
    best: float | None = None
    for opt in options(nf, ask):
        score = policy.score(nf, ask, opt, demand)
        if best is None or score > best:
            best = score
    return best


def best_option(policy: Policy, nf: NodeFree, ask: AllocAsk, demand: Demand | None) -> Option | None:
    """The node's option for `ask`: highest score, then the policy's preference, then device
    order. Asked only of the node that won, so preferences cost nothing on the others."""
    got = best_option_at(policy, nf, ask, demand)
    return None if got is None else got[1]


def best_option_at(policy: Policy, nf: NodeFree, ask: AllocAsk,
                   demand: Demand | None) -> tuple[int, Option] | None:
    """`best_option` and its position among `options(nf, ask)` (for `ScoreMemo.choices`)."""
    best: tuple[float, float, int, Option] | None = None
    for i, opt in enumerate(options(nf, ask)):
        score = policy.score(nf, ask, opt, demand)
        if best is not None and score < best[0]:
            continue
        prefer = policy.prefer(nf, ask, opt)
        if best is None or (score, prefer) > best[:2]:
            best = (score, prefer, i, opt)
    return None if best is None else (best[2], best[3])


def option_at(nf: NodeFree, ask: AllocAsk, position: int) -> Option:
    """The option at `position` among `options(nf, ask)`."""
    return next(islice(options(nf, ask), position, None))
