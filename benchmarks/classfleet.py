"""The fleets of benchmarks/classes.py: how an operator splits the H100s into MIG, shared and whole GPUs,
and the MIG layouts that follow the queue (the service's own re-layout planner) as a further scenario.

A split is `mig:shared:whole` parts of the GPUs. Split per GPU, every node gets its parts (rounded with a
carry over the nodes in name order), so with half a node's GPUs in MIG or shared mode no node keeps 8
whole GPUs for an 8-GPU training task. Split per node, each node is given one mode whole: the mode
furthest below its part of the GPUs seen so far (nodes in name order; ties to MIG, then shared), so
most 8-GPU nodes stay whole. Both are operator choices a real fleet can make (MIG mode and our plugin's
shared devices are per-GPU settings).

`MigRelayer` is the re-layout row: MIG-mode GPUs start at the balanced layout, and a task that fits
nowhere asks the planner (nomad_gpu/domain/migplanner.py, what the service's re-layout loop asks) for a
re-layout of one GPU's idle instances for the task's MIG alternative (`waiting_mig_asks`, as the loop
builds them); the new layout replaces that GPU's instances in the ledger and the task is fitted again.
The arrival-only experiment has no clock, so the re-layout takes no time and no cool-down applies: this
is the layouts' best case, not their latency (benchmarks/mig.py measures that).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.inventory import Gpu, GpuMode, Inventory, MigSlice, Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.miglayout import MigGeometry, Placed, geometry_for
from nomad_gpu.domain.migplanner import MigGpu, MigInstance, PlanSettings, plan, waiting_mig_asks
from nomad_gpu.domain.requests import JobRequest
from nomad_gpu.domain.units import MigProfile
from nomad_gpu.sim.trace import Trace

H100, H100_MIB = "NVIDIA H100 80GB HBM3", 81920
LAYOUT = (("3g.40gb", 4, 40448), ("2g.20gb", 0, 20096), ("1g.10gb", 2, 9984), ("1g.10gb", 3, 9984))
"""The balanced static layout (profile, first memory slice, the memory NVML reports on an H100 80GB):
3g.40gb@4 + 2g.20gb@0 + 1g.10gb@2 + 1g.10gb@3, a valid placement of 7 compute and 8 memory slices."""
MIB = {"1g.10gb": 9984, "1g.20gb": 20096, "2g.20gb": 20096, "3g.40gb": 40448, "4g.40gb": 40448, "7g.80gb": 81152}
_G = geometry_for(H100, [("3g.40gb", 4)])
assert _G is not None
GEOMETRY: MigGeometry = _G

Split = tuple[int, int, int]


@dataclass(frozen=True)
class SplitSpec:
    """One classes row: the split, per GPU or per node, with or without re-layouts (`1:1:6/node+relayout`)."""

    parts: Split
    by_node: bool | str = False
    """False: per GPU; True: one mode per node; "whole": whole nodes for the whole part, the rest per GPU."""
    relayout: bool = False
    training_shared: bool = False
    """The operator's training tiers are `[[gpu], [share]]`: a one-GPU training task the class chooses for
    may take an idle shared GPU whole (a share of 1000 milli: every slot, so no co-tenant can join)."""
    preempt: bool = False
    """The replay takes GPUs back under the default preemption policy (nomad_gpu/sim/preempt.py)."""

    @staticmethod
    def parse(text: str) -> SplitSpec:
        """`mig:shared:whole`, then optionally `/node` or `/whole-nodes`, then any of `+relayout`,
        `+training-shared`, `+preempt`; ValueError otherwise."""
        rest, *flags = text.split("+")
        if set(flags) - {"relayout", "training-shared", "preempt"} or len(set(flags)) != len(flags):
            raise ValueError(text)
        nums, slash, per = rest.partition("/")
        if slash and per not in ("node", "whole-nodes"):
            raise ValueError(text)
        parts = [int(x) for x in nums.split(":")]
        if len(parts) != 3 or min(parts) < 0 or sum(parts) == 0:
            raise ValueError(text)
        return SplitSpec((parts[0], parts[1], parts[2]), "whole" if per == "whole-nodes" else bool(slash),
                         "relayout" in flags,
                         "training-shared" in flags, "preempt" in flags)

    @property
    def label(self) -> str:
        per = {False: "", True: " per node", "whole": " whole nodes"}[self.by_node]
        return ":".join(map(str, self.parts)) + per + (
            " + re-layouts" if self.relayout else "") + (
            " + training on idle shared GPUs" if self.training_shared else "") + (
            " + preemption" if self.preempt else "")


def _gpu(name: str, k: int, mode: GpuMode) -> Gpu:
    return Gpu(InstanceId(f"{name}/gpu{k}"), H100, H100_MIB, mode=mode)


def _balanced(parent: str) -> list[MigSlice]:
    return [MigSlice(InstanceId(f"{parent}/mig{j}"), H100, MigProfile.parse(p), mib, pci_bus_id=parent)
            for j, (p, _, mib) in enumerate(LAYOUT)]


def _node_modes(trace: Trace, split: Split) -> dict[str, tuple[int, int]]:
    """Per node (by name): how many of its GPUs are MIG-mode and how many shared."""
    total = sum(split)
    out: dict[str, tuple[int, int]] = {}
    carry_mig = carry_shared = 0.0
    for tn in sorted(trace.nodes, key=lambda n: n.name):
        carry_mig += tn.gpus * split[0] / total
        carry_shared += tn.gpus * split[1] / total
        n_mig = min(tn.gpus, int(carry_mig))
        n_shared = min(tn.gpus - n_mig, int(carry_shared))
        carry_mig -= n_mig
        carry_shared -= n_shared
        out[tn.name] = (n_mig, n_shared)
    return out


def _whole_node_modes(trace: Trace, split: Split) -> dict[str, tuple[int, int]]:
    """Per node: all its GPUs in the one mode furthest below its part of the GPUs seen so far."""
    total = sum(split)
    given = [0, 0, 0]
    seen = 0
    out: dict[str, tuple[int, int]] = {}
    for tn in sorted(trace.nodes, key=lambda n: n.name):
        seen += tn.gpus
        mode = max(range(3), key=lambda m: (split[m] * seen / total - given[m], -m))
        given[mode] += tn.gpus
        out[tn.name] = (tn.gpus if mode == 0 else 0, tn.gpus if mode == 1 else 0)
    return out


def _whole_nodes_then_gpus(trace: Trace, split: Split) -> dict[str, tuple[int, int]]:
    """Whole nodes of whole GPUs for the whole part (homes for multi-GPU training); the other nodes'
    GPUs split between MIG and shared per GPU, with a carry."""
    whole_of = _whole_node_modes(trace, (split[0] + split[1], 0, split[2]))
    rest = Trace(tuple(n for n in trace.nodes if whole_of[n.name][0]), trace.pods)
    out = {name: (0, 0) for name, (n_rest, _) in whole_of.items() if not n_rest}
    return out | _node_modes(rest, (split[0], split[1], 0))


def fleet(trace: Trace, scenario: str, split: Split = (0, 0, 1), by_node: bool | str = False) -> Inventory:
    """The openb nodes with every GPU an H100 80GB: whole (a), taking both (b), or split (c)."""
    pick = _whole_nodes_then_gpus if by_node == "whole" else _whole_node_modes if by_node else _node_modes
    modes = pick(trace, split) if scenario not in ("whole", "share") else {}
    nodes: list[Node] = []
    for tn in sorted(trace.nodes, key=lambda n: n.name):
        gpus: list[Gpu] = []
        migs: list[MigSlice] = []
        if scenario == "whole":
            gpus = [_gpu(tn.name, k, GpuMode.WHOLE) for k in range(tn.gpus)]
        elif scenario == "share":
            gpus = [_gpu(tn.name, k, GpuMode.FLEX) for k in range(tn.gpus)]
        else:
            n_mig, n_shared = modes[tn.name]
            for k in range(tn.gpus):
                if k < n_mig:
                    migs += _balanced(f"{tn.name}/gpu{k}")
                else:
                    gpus.append(_gpu(tn.name, k, GpuMode.SHARED if k < n_mig + n_shared else GpuMode.WHOLE))
        nodes.append(Node(NodeId(tn.name), name=tn.name, cpu_mhz=tn.cpu_milli, memory_mb=tn.memory_mib,
                          gpus=tuple(gpus), migs=tuple(migs)))
    return Inventory.of(nodes)


class MigRelayer:
    """The fleet's MIG layouts, re-laid for a task that fits nowhere, through the service's planner."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.layouts: dict[str, dict[InstanceId, Placed]] = {}
        """Per MIG-mode GPU (its parent ID): its instances and where they sit."""
        self.node_of: dict[str, NodeId] = {}
        self.busy: set[InstanceId] = set()
        self.relayouts = 0
        self._made = 0
        starts = {j: Placed(start, GEOMETRY.shape(p).size, p)  # type: ignore[union-attr]
                  for j, (p, start, _) in enumerate(LAYOUT)}
        for node in ledger.inventory:
            for m in node.migs:
                parent = m.pci_bus_id or ""
                j = int(m.id.rsplit("/mig", 1)[1])
                self.layouts.setdefault(parent, {})[m.id] = starts[j]
                self.node_of[parent] = node.id

    def held(self, instance_ids: tuple[InstanceId, ...]) -> None:
        """Instances a placement took: never destroyed (the experiment has no departures)."""
        self.busy.update(instance_ids)

    def relayout_for(self, job: JobRequest) -> bool:
        """Re-lay one GPU for the job's MIG alternative; False when the planner finds no GPU to re-lay."""
        asks = waiting_mig_asks([job], self.ledger.index.nodes())
        if not asks or not self.layouts:
            return False
        view = [MigGpu(self.node_of[parent], parent, H100, GEOMETRY,
                       tuple(MigInstance(str(i), p, i in self.busy) for i, p in sorted(inst.items())))
                for parent, inst in sorted(self.layouts.items()) if any(i not in self.busy for i in inst)]
        done = plan(view, asks, now=0.0, settings=PlanSettings(cool_down_s=0.0))
        for r in done:
            self._apply(r.gpu, r.after, {InstanceId(d) for d in r.destroy})
        return bool(done)

    def _apply(self, parent: str, after: tuple[Placed, ...], destroy: set[InstanceId]) -> None:
        kept = {i: p for i, p in self.layouts[parent].items() if i not in destroy}
        for p in after:
            if p not in kept.values():
                self._made += 1
                kept[InstanceId(f"{parent}/r{self._made}")] = p
        self.layouts[parent] = kept
        self.relayouts += 1
        node = self.ledger.inventory.nodes[self.node_of[parent]]
        others = tuple(m for m in node.migs if m.pci_bus_id != parent)
        mine = tuple(MigSlice(i, H100, MigProfile.parse(p.profile), MIB[p.profile], pci_bus_id=parent)
                     for i, p in sorted(kept.items()))
        self.ledger.set_node(replace(node, migs=others + mine))
