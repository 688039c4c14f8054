"""What a placement policy sees and returns: options on a node, the `Policy` contract, and how a
node's score and best option follow from them (`best_score`, `best_option`, `ScoreMemo`).

Split from `policies` (the registry) so that policy modules (`baselines`, `fragaware`) can build on
it without importing the registry that lists them, and from `fit` so that the fitter keeps to
candidates and verdicts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Protocol

from nomad_gpu.domain.fragmentation import Demand, GpuState, gpu_state
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import MILLI_PER_GPU, InstanceId
from nomad_gpu.domain.requests import AllocAsk, GpuShare, MigSlices, WholeGpus
from nomad_gpu.domain.units import split_mig_device_name


@dataclass(frozen=True)
class Option:
    """One way to host an ask on a node: the instances and the device group they come from."""

    instance_ids: tuple[InstanceId, ...] = ()
    device_name: str | None = None
    share_milli: int = 0
    share_gpu: InstanceId | None = None
    """For a share pinned to share instances (`instance_ids`), their GPU."""

    @property
    def shared_gpu(self) -> InstanceId:
        """The GPU a share option runs on, either way it is pinned."""
        return self.share_gpu or self.instance_ids[0]


def options(nf: NodeFree, ask: AllocAsk) -> Iterator[Option]:
    """Every GPU-feasible way to host `ask` on `nf` (CPU and memory are checked elsewhere)."""
    g = ask.gpu
    if g is None:
        yield Option()
    elif isinstance(g, WholeGpus):
        for model, ids in sorted(nf.whole_free().items()):
            if not g.allows(model) or len(ids) < g.count:
                continue
            if g.min_memory_mib and nf.gpus[ids[0]].memory_mib < g.min_memory_mib:
                continue
            yield Option(tuple(ids[: g.count]), model)
    elif isinstance(g, MigSlices):
        for name, ids in sorted(nf.mig_free.items()):
            split = split_mig_device_name(name)
            if split is None or split[1] != g.profile or not g.allows(split[0]) or len(ids) < g.count:
                continue
            yield Option(tuple(ids[: g.count]), name)
    else:
        for gid, gpu in nf.gpus.items():
            if not gpu.mode.takes_shares or not g.allows(gpu.model) or nf.gpu_free[gid] < g.milli:
                continue
            if gpu.max_tenants is not None and nf.tenants.get(gid, 0) >= gpu.max_tenants:
                continue
            if gpu.share_ids:  # the device plugin's share instances: pin the first free ones
                yield Option(tuple(nf.slot_free[gid][: gpu.instances_for(g.milli)]), gpu.share_device or gpu.model,
                             g.milli, gid)
            else:
                yield Option((gid,), gpu.model, g.milli)


def share_cost(nf: NodeFree, gid: InstanceId, milli: int) -> int:
    """Free milli a share of `milli` takes from GPU `gid`: whole slots where it has share instances."""
    gpu = nf.gpus[gid]
    if not gpu.share_ids:
        return milli
    return nf.gpu_free[gid] - gpu.milli_of(len(nf.slot_free[gid]) - gpu.instances_for(milli))


def gpu_state_after(nf: NodeFree, opt: Option) -> GpuState:
    """The node's GPU state tuple (as `Demand` memoises it) once `opt` is committed."""
    if opt.share_milli:
        gid = opt.shared_gpu
        return gpu_state(nf, {gid: share_cost(nf, gid, opt.share_milli)})
    return gpu_state(nf, {i: MILLI_PER_GPU for i in opt.instance_ids if i in nf.gpus})


def left_after(nf: NodeFree, ask: AllocAsk, opt: Option) -> int:
    """Free capacity of the asked kind left on the node (whole GPUs, MIG instances, share milli)."""
    g = ask.gpu
    if isinstance(g, GpuShare):
        gid = opt.shared_gpu
        return nf.gpu_free[gid] - share_cost(nf, gid, g.milli)
    if isinstance(g, MigSlices):
        return len(nf.mig_free.get(opt.device_name or "", ())) - g.count
    if isinstance(g, WholeGpus):
        return len(nf.whole_free().get(opt.device_name or "", ())) - g.count
    return nf.cpu_free - ask.cpu_mhz


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
