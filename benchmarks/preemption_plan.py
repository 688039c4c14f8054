"""CPU of one preemption plan (nomad_gpu/domain/preemption.py) on a large fleet, the cost a cycle pays.

A fleet of `--nodes` nodes of 8 whole GPUs, every GPU held by a running, preemptible exploratory job of the
waiting jobs' own team, and 8 waiting serving jobs (the most a cycle looks at): once asking 16 GPUs (no
node can ever hold them: every node is ruled out, the common steady case of a job preemption cannot help)
and once asking 2 (each finds its node and victims: what a cycle pays when preemptions start).

    .venv/bin/python benchmarks/preemption_plan.py --nodes 1000
"""

from __future__ import annotations

import argparse
import time

from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Gpu, Inventory, Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.policies import get_policy
from nomad_gpu.domain.preemption import PreemptionPolicy, Running, Waiting, plan_preemptions
from nomad_gpu.domain.requests import AllocAsk, JobRequest, WholeGpus

MODEL = "NVIDIA A100-SXM4-80GB"


def fleet(nodes: int) -> tuple[Ledger, dict[EntryId, Running]]:
    inventory = Inventory.of(Node(NodeId(f"n{k:05d}"), name=f"n{k:05d}", cpu_mhz=64_000, memory_mb=512_000,
                                  gpus=tuple(Gpu(InstanceId(f"GPU-{k}-{g}"), MODEL, 81_920) for g in range(8)))
                             for k in range(nodes))
    ledger, running = Ledger(inventory), {}
    for node in inventory:
        for gpu in node.gpus:
            entry = EntryId(f"x-{gpu.id}")
            ledger.reserve(entry, Team("a"), [AllocPlacement("g", 0, node.id, 0, 0, (gpu.id,), MODEL,
                                                             gpu_equivalents=1.0)])
            running[entry] = Running(entry, Team("a"), "exploratory", 50, 0.0, True)
    return ledger, running


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    args = parser.parse_args()
    ledger, running = fleet(args.nodes)
    for need in (16, 2):
        waiting = [Waiting(JobRequest(EntryId(f"s{i}"), Team("a"), (AllocAsk("g", 0, 0, 0, WholeGpus(need)),)),
                           "serving", 0.0) for i in range(8)]
        started = time.process_time()
        plans = plan_preemptions(waiting, running, ledger, policy=PreemptionPolicy(),
                                 fit_policy=get_policy("frag-aware"), now=1e6)
        took = time.process_time() - started
        print(f"{args.nodes} nodes, {len(running)} running, 8 waiting for {need} GPUs: {len(plans)} preemptions "
              f"planned in {took:.3f} s CPU")


if __name__ == "__main__":
    main()
