"""Same input, same decisions, in every process: nothing may depend on string hash order.

Python randomises `str` hashes per process, so iterating a set of node or entry IDs gives a
different order in the service after a restart, in the simulator and in a benchmark. The same
scenario therefore runs in subprocesses with different PYTHONHASHSEEDs and must print the same.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.server  # runs the scenario in subprocesses: not in `make check`

SCENARIO = r"""
from nomad_gpu.domain.cycle import CycleConfig, run_cycle
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Gpu, GpuMode, Inventory, MigSlice, Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.requests import AllocAsk, GpuShare, JobRequest, MigSlices, WholeGpus
from nomad_gpu.domain.units import MigProfile

def node(k):
    gpus = tuple(Gpu(InstanceId(f"GPU-{k}-{i}"), "A100") for i in range(8))
    gpus += (Gpu(InstanceId(f"GPU-{k}-s"), "A100", mode=GpuMode.SHARED, max_tenants=3),)
    migs = tuple(MigSlice(InstanceId(f"MIG-{k}-{i}"), "H100", MigProfile.parse("3g.40gb")) for i in range(2))
    return Node(NodeId(f"node-{k}"), cpu_mhz=64000, memory_mb=512000, gpus=gpus, migs=migs)

def job(entry, gpu, groups=1, at=0.0, team="t"):
    asks = tuple(AllocAsk(f"g{i}", 0, 1000, 1000, gpu) for i in range(groups))
    return JobRequest(EntryId(entry), Team(team), asks, submitted_at=at)

for policy in ("first-fit", "best-fit", "frag-aware"):
    ledger = Ledger(Inventory.of(node(k) for k in range(12)))
    cfg = CycleConfig(policy=policy, hol_threshold_s=50.0)
    queue = [job("wide", WholeGpus(8), groups=10), job("migs", MigSlices("3g.40gb"), groups=10, at=1),
             job("shares", GpuShare(400), groups=10, at=2)]
    print(policy, run_cycle(ledger, queue, now=0.0, config=cfg).decisions)
    for entry in ("wide", "migs", "shares"):
        ledger.release(EntryId(entry))
    queue = [job(f"j{i}", g, at=10.0 + i, team=f"team{i % 3}")
             for i, g in enumerate([WholeGpus(8), WholeGpus(1), WholeGpus(3), GpuShare(300),
                                    MigSlices("3g.40gb"), WholeGpus(8), GpuShare(700), WholeGpus(2)] * 3)]
    result = run_cycle(ledger, queue, now=100.0, config=cfg)
    print(policy, result.decisions, sorted(result.holds.items()))
"""


def run_with_seed(seed: int) -> str:
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    done = subprocess.run([sys.executable, "-c", SCENARIO], env=env, capture_output=True, text=True, check=True)
    return done.stdout


def test_decisions_do_not_depend_on_the_hash_seed() -> None:
    outputs = {seed: run_with_seed(seed) for seed in (0, 1, 2, 3)}
    assert "Admit" in outputs[0]
    assert len(set(outputs.values())) == 1, "decisions differ between processes"
