"""The fitter's memo by node state changes speed, never decisions.

`ScoreMemo` keeps each node state's score and its best option's position across decisions; nodes
in the same state (and of the same totals) must then be placed exactly as if every node were
scored afresh. Two ledgers take the same random jobs one by one (and release some), one fitted with
the memo and one without, and must make the same placements.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nomad_gpu.domain.fit import FitContext, Fitter
from nomad_gpu.domain.fragmentation import Demand
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Gpu, GpuMode, Inventory, MigSlice, Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import NoFit
from nomad_gpu.domain.policies import get_policy
from nomad_gpu.domain.requests import AllocAsk, GpuAsk, GpuShare, JobRequest, MigSlices, WholeGpus
from nomad_gpu.domain.scoring import ScoreMemo
from nomad_gpu.domain.units import MigProfile

from .builders import A100, H100

MODES = (GpuMode.WHOLE, GpuMode.FLEX, GpuMode.SHARED)


def cluster(kinds: list[tuple[int, int, int, int]]) -> Inventory:
    """Nodes that repeat (so that states repeat): (CPU cores, GPUs, MIG instances, mode pattern)."""
    nodes = []
    for n, (cores, gpus, migs, pattern) in enumerate(kinds):
        name = f"n{n}"
        model = A100 if n % 3 else H100
        devices = tuple(Gpu(InstanceId(f"GPU-{name}-{k}"), model, 81_920, mode=MODES[(k * pattern) % 3])
                        for k in range(gpus))
        mig = tuple(MigSlice(InstanceId(f"MIG-{name}-{k}"), model, MigProfile.parse("1g.10gb"))
                    for k in range(migs))
        nodes.append(Node(NodeId(name), cpu_mhz=cores * 1000, memory_mb=512_000, gpus=devices, migs=mig))
    return Inventory.of(nodes)


ASKS: list[GpuAsk | None] = [None, WholeGpus(1), WholeGpus(2), WholeGpus(4), WholeGpus(8), GpuShare(250),
                             GpuShare(500), GpuShare(750), MigSlices("1g.10gb")]


@settings(max_examples=60, deadline=None)
@given(kinds=st.lists(st.tuples(st.sampled_from([16, 32, 32, 64]), st.sampled_from([2, 4, 8, 8]),
                                st.sampled_from([0, 0, 2]), st.integers(0, 2)), min_size=2, max_size=6),
       copies=st.integers(3, 6),
       jobs=st.lists(st.tuples(st.sampled_from(range(len(ASKS))), st.sampled_from([1, 4, 8]),
                               st.integers(0, 3)), min_size=20, max_size=80),
       policy=st.sampled_from(["best-fit", "fgd", "frag-aware"]),
       limit=st.sampled_from([None, 4]))
def test_memoised_fitting_places_like_fresh_scoring(kinds: list[tuple[int, int, int, int]], copies: int,
                                                    jobs: list[tuple[int, int, int]], policy: str,
                                                    limit: int | None) -> None:
    inventory = cluster(kinds * copies)
    queue = [JobRequest(EntryId(f"j{i}"), Team("t"), (AllocAsk("g", 0, cores * 1000, 1024, ASKS[a]),))
             for i, (a, cores, _) in enumerate(jobs)]
    demand = Demand.from_jobs(queue)
    memoised, fresh = Ledger(inventory), Ledger(inventory)
    memo = ScoreMemo()
    chosen = get_policy(policy)
    admitted: list[EntryId] = []
    for job, (_, _, finish) in zip(queue, jobs, strict=True):
        if finish == 0 and admitted:  # a quarter of the steps also end the oldest running job
            done = admitted.pop(0)
            memoised.release(done)
            fresh.release(done)
        with_memo = Fitter(memoised.index, FitContext(chosen, demand, per_class_limit=limit, memo=memo)).fit_job(job)
        without = Fitter(fresh.index, FitContext(chosen, demand, per_class_limit=limit)).fit_job(job)
        assert with_memo == without
        if not isinstance(with_memo, NoFit):
            memoised.reserve(job.entry, job.team, with_memo)
            fresh.reserve(job.entry, job.team, with_memo)
            admitted.append(job.entry)
