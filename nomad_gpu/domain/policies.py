"""Placement policies: given a node that can host an ask, which instances to use and how good it is.

A policy never decides feasibility of CPU, memory, datacenter or reservations (the fitter does) and
never reads anything but the node's free state and the demand. It returns `Option`s; the fitter
takes the highest score, ties going to the node with the better priority rank. Policies:

- `first-fit`: the first node in priority order; a baseline.
- `best-fit`: the node (and GPU) left with the least free capacity of the asked kind.
- `frag-aware` (default): the placement that raises the node's fragmentation under the expected
  demand the least (FGD's idea), then best-fit. Keeps whole nodes whole for 8-GPU jobs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.fragmentation import Demand
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
            yield Option((gid,), gpu.model, g.milli)


def gpu_state_after(nf: NodeFree, opt: Option) -> tuple[tuple[str, object, int], ...]:
    """The node's GPU state tuple (as `Demand` memoises it) once `opt` is committed."""
    taken = {i: (opt.share_milli or MILLI_PER_GPU) for i in opt.instance_ids if i in nf.gpus}
    return tuple((g.model, g.mode, nf.gpu_free[gid] - taken.get(gid, 0)) for gid, g in nf.gpus.items())


def left_after(nf: NodeFree, ask: AllocAsk, opt: Option) -> int:
    """Free capacity of the asked kind left on the node: what best-fit minimises."""
    g = ask.gpu
    if isinstance(g, GpuShare):
        (gid,) = opt.instance_ids
        return nf.gpu_free[gid] - g.milli
    if isinstance(g, MigSlices):
        return len(nf.mig_free.get(opt.device_name or "", ())) - g.count
    if isinstance(g, WholeGpus):
        return len(nf.whole_free().get(opt.device_name or "", ())) - g.count
    return nf.cpu_free - ask.cpu_mhz


class Policy(Protocol):
    name: str
    exhaustive: bool
    """True: the fitter must offer every node in rank order (first-fit); False: a few per shape."""

    def score(self, nf: NodeFree, ask: AllocAsk, opt: Option, demand: Demand | None) -> float:
        """Higher is better."""
        ...


class FirstFit:
    name = "first-fit"
    exhaustive = True

    def score(self, nf: NodeFree, ask: AllocAsk, opt: Option, demand: Demand | None) -> float:
        return 0.0


class BestFit:
    name = "best-fit"
    exhaustive = False

    def score(self, nf: NodeFree, ask: AllocAsk, opt: Option, demand: Demand | None) -> float:
        return -float(left_after(nf, ask, opt))


class FragAware:
    name = "frag-aware"
    exhaustive = False

    def score(self, nf: NodeFree, ask: AllocAsk, opt: Option, demand: Demand | None) -> float:
        best_fit = -float(left_after(nf, ask, opt)) / (MILLI_PER_GPU * 64)
        if demand is None or not demand.shapes or isinstance(ask.gpu, MigSlices) or ask.gpu is None:
            return best_fit
        before = demand.fragmentation(nf)
        after = demand.fragmentation_of(gpu_state_after(nf, opt), nf.cpu_free - ask.cpu_mhz)
        # the frag delta dominates; best-fit only separates equal deltas
        return -(after - before) + best_fit


POLICIES: Mapping[str, type[FirstFit] | type[BestFit] | type[FragAware]] = {
    "first-fit": FirstFit,
    "best-fit": BestFit,
    "frag-aware": FragAware,
}
DEFAULT_POLICY = "frag-aware"


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise InvalidRequest(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None
