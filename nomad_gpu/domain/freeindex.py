"""Free capacity per node, and an index over it so that finding a fit does not scan the cluster.

`NodeFree` is what one node has left after the ledger's commitments. `FreeIndex` buckets nodes by
the shapes they can still take, as each registered kind reports them (free whole GPUs per model,
free MIG instances per profile, the largest free share per model), keeps totals for "why not?"
answers, and is updated on every ledger move. Candidate lookups cost O(shapes), not O(nodes),
which is what keeps a decision at 10,000 nodes as cheap as at 1,000.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from sortedcontainers import SortedDict

from nomad_gpu.domain.errors import LedgerConflict
from nomad_gpu.domain.ids import MILLI_PER_GPU, InstanceId, NodeId
from nomad_gpu.domain.inventory import Gpu, Node
from nomad_gpu.domain.kinds.registry import kinds, sized
from nomad_gpu.domain.placement import AllocPlacement


@dataclass
class NodeFree:
    """What one node still offers. Mutated only through `take` (which copies) and `of`."""

    node: Node
    cpu_free: int
    mem_free: int
    gpu_free: dict[InstanceId, int]
    """Free milli-GPU of every healthy GPU (a whole GPU in use has 0)."""
    tenants: dict[InstanceId, int]
    mig_free: dict[str, list[InstanceId]]
    """Free healthy MIG instances by device name, in inventory order."""
    gpus: dict[InstanceId, Gpu]
    slot_free: dict[InstanceId, list[InstanceId]]
    """Free share instances per GPU that has them (the device plugin's), in slot order; such a GPU's
    free milli is always what its free instances stand for (`Gpu.milli_of`)."""
    slot_gpu: dict[InstanceId, InstanceId]
    """Share instance -> its GPU (fixed for the node, shared across copies)."""
    unhealthy: frozenset[InstanceId] = frozenset()
    """Devices the node reports unhealthy (GPUs, their share instances, MIG instances): never offered; a
    booking of what Nomad reports on one (`take(reported=True)`) passes, for Nomad leaves it running there
    (nomad/structs/devices.go v2.0.5 skips them only for new placements)."""
    _whole: dict[str, list[InstanceId]] | None = None
    _share: dict[str, int] | None = None
    _sig: str | None = None
    _layout: tuple[tuple[InstanceId, str, int], ...] | None = None
    _state: tuple[tuple[str, int, int], ...] | None = None
    _sig_fixed: tuple[tuple[InstanceId, str, str], ...] | None = None

    @property
    def id(self) -> NodeId:
        return self.node.id

    @property
    def offered(self) -> bool:
        return self.node.schedulable

    @staticmethod
    def of(node: Node, held: Iterable[AllocPlacement]) -> NodeFree:
        """Capacity of `node` after `held`; lenient, since held work may sit on vanished devices."""
        gpus = {g.id: g for g in node.gpus if g.healthy}
        mig: dict[str, list[InstanceId]] = {}
        for m in node.migs:
            if m.healthy:
                mig.setdefault(m.device_name, []).append(m.id)
        slot_free = {gid: list(g.share_ids) for gid, g in gpus.items() if g.share_ids}
        slot_gpu = {sid: g.id for g in node.gpus for sid in g.share_ids}
        sick = frozenset({i for g in node.gpus if not g.healthy for i in (g.id, *g.share_ids)}
                         | {m.id for m in node.migs if not m.healthy})
        nf = NodeFree(node, node.cpu_mhz, node.memory_mb, {g: MILLI_PER_GPU for g in gpus}, {}, mig, gpus,
                      slot_free, slot_gpu, sick)
        for p in held:
            nf._apply(p, strict=False)
        return nf

    def copy(self) -> NodeFree:
        return NodeFree(self.node, self.cpu_free, self.mem_free, dict(self.gpu_free), dict(self.tenants),
                        {k: list(v) for k, v in self.mig_free.items()}, self.gpus,
                        {k: list(v) for k, v in self.slot_free.items()}, self.slot_gpu, self.unhealthy,
                        _layout=self._layout, _sig_fixed=self._sig_fixed)

    def layout(self) -> tuple[tuple[InstanceId, str, int], ...]:
        """(id, model, kind) per healthy GPU in device order; kind: 1 takes whole, 2 takes shares.
        Fixed for the node, so computed once and carried across copies."""
        if self._layout is None:
            self._layout = tuple((gid, g.model, (1 if g.mode.takes_whole else 0) | (2 if g.mode.takes_shares else 0))
                                 for gid, g in self.gpus.items())
        return self._layout

    def gpu_state(self) -> tuple[tuple[str, int, int], ...]:
        """(model, kind, free milli) per GPU: what fragmentation depends on (cached until a change)."""
        if self._state is None:
            free = self.gpu_free
            self._state = tuple((model, kind, free[gid]) for gid, model, kind in self.layout())
        return self._state

    def take(self, p: AllocPlacement, *, reported: bool = False) -> NodeFree:
        """A copy with `p` committed; LedgerConflict if anything in it is not free. `reported`: Nomad runs
        `p` already, so an unhealthy device in it is booked as it is, not refused."""
        out = self.copy()
        out._apply(p, strict=True, sick_ok=reported)
        return out

    def _apply(self, p: AllocPlacement, *, strict: bool, sick_ok: bool = True) -> None:
        self._whole = self._share = self._sig = self._state = None
        unhealthy = self.unhealthy if sick_ok else frozenset()

        def conflict(msg: str) -> None:
            if strict:
                raise LedgerConflict(f"node {self.node.id}: {msg}")

        if p.cpu_mhz > self.cpu_free or p.memory_mb > self.mem_free:
            conflict(f"not enough CPU/memory for {p.group}[{p.index}]")
        self.cpu_free = max(0, self.cpu_free - p.cpu_mhz)
        self.mem_free = max(0, self.mem_free - p.memory_mb)
        if p.is_share and p.share_gpu is None:  # advisory sharing: the placement names the GPU itself
            (gid,) = p.instance_ids
            if gid in unhealthy:
                return  # not offered: nothing to take from it
            gpu = self.gpus.get(gid)
            if gpu is None or not gpu.mode.takes_shares:
                conflict(f"{gid} is not a shareable GPU here")
                return
            free = self.gpu_free[gid]
            if free < p.share_milli:
                conflict(f"{gid} has {free} milli free, {p.share_milli} asked")
            n = self.tenants.get(gid, 0)
            if strict and gpu.max_tenants is not None and n >= gpu.max_tenants:
                conflict(f"{gid} already has {n} tenants")
            self.gpu_free[gid] = max(0, free - p.share_milli)
            self.tenants[gid] = n + 1
            return
        if p.is_share and p.share_gpu not in unhealthy:
            self._check_share(p, conflict)
        touched: set[InstanceId] = set()
        for iid in p.instance_ids:
            if iid in unhealthy:
                continue  # held where Nomad left it, not offered: nothing to take
            if iid in self.gpus:
                gpu = self.gpus[iid]
                if not gpu.mode.takes_whole or self.gpu_free[iid] != MILLI_PER_GPU:
                    conflict(f"{iid} is not free as a whole GPU")
                self.gpu_free[iid] = 0
                if iid in self.slot_free:
                    self.slot_free[iid] = []
                continue
            owner = self.slot_gpu.get(iid)
            if owner is not None:
                free_slots = self.slot_free.get(owner)
                if free_slots is not None and iid in free_slots:
                    free_slots.remove(iid)
                    touched.add(owner)
                else:
                    conflict(f"share instance {iid} is not free")
                continue
            free_list = self.mig_free.get(p.device_name or "", [])
            if iid in free_list:
                free_list.remove(iid)
            else:
                conflict(f"{iid} is not a free instance of {p.device_name!r}")
        for gid in touched:
            self.gpu_free[gid] = self.gpus[gid].milli_of(len(self.slot_free[gid]))
        if p.is_share and p.share_gpu is not None:
            self.tenants[p.share_gpu] = self.tenants.get(p.share_gpu, 0) + 1

    def _check_share(self, p: AllocPlacement, conflict: Callable[[str], None]) -> None:
        """A share pinned to share instances: all of one shareable GPU, as many as its milli needs."""
        gid = p.share_gpu
        gpu = self.gpus.get(gid) if gid is not None else None
        if gpu is None or not gpu.mode.takes_shares or not gpu.share_ids:
            conflict(f"{gid} is not a GPU with share instances here")
            return
        if any(self.slot_gpu.get(i) != gid for i in p.instance_ids):
            conflict(f"share instances {list(p.instance_ids)} are not all of {gid}")
        if len(set(p.instance_ids)) < gpu.instances_for(p.share_milli):
            conflict(f"{p.share_milli} milli needs {gpu.instances_for(p.share_milli)} share instances of {gid}, "
                     f"{len(p.instance_ids)} given")

    def signature(self) -> str:
        """Everything a placement on this node depends on except which node it is: free CPU and
        memory, then per device its kind, free milli and tenants, then free MIG instances per
        device name. Nodes with equal signatures offer the same options in the same order. A
        string, so that its hash is computed once (it keys memos looked up millions of times)."""
        if self._sig is None:
            free, tenants = self.gpu_free, self.tenants
            gpus = ";".join(f"{head}{free[gid]},{tenants.get(gid, 0)}{tail}" for gid, head, tail in self._sig_parts())
            migs = ";".join(f"{name},{len(ids)}" for name, ids in sorted(self.mig_free.items()))
            self._sig = f"{self.cpu_free}|{self.mem_free}|{gpus}|{migs}"
        return self._sig

    def _sig_parts(self) -> tuple[tuple[InstanceId, str, str], ...]:
        """The fixed text around each GPU's free milli and tenants in `signature`, once per node."""
        if self._sig_fixed is None:
            # A node whose plugin publishes its topology offers different GPU sets (domain/topochoice.py)
            # from a node in the same free state that sits otherwise: its layout joins the first part.
            topology = self.node.topology
            first = f"{topology.layout_key(list(self.gpus))}#" if topology is not None else ""
            self._sig_fixed = tuple((gid, f"{first if k == 0 else ''}{g.model},{g.mode.value},{g.max_tenants},"
                                          f"{g.memory_mib},",
                                     f",{len(g.share_ids)},{g.share_device}")
                                    for k, (gid, g) in enumerate(self.gpus.items()))
        return self._sig_fixed

    # ---- shapes offered ----------------------------------------------------------------------
    def whole_free(self) -> dict[str, list[InstanceId]]:
        """Fully free whole-capable GPUs per model (cached until the next change; do not mutate)."""
        if self._whole is None:
            out: dict[str, list[InstanceId]] = {}
            for gid, g in self.gpus.items():
                if g.mode.takes_whole and self.gpu_free[gid] == MILLI_PER_GPU:
                    out.setdefault(g.model, []).append(gid)
            self._whole = out
        return self._whole

    def share_free(self) -> dict[str, int]:
        """Largest free milli on one shareable GPU (with a tenant slot left), per model."""
        if self._share is not None:
            return self._share
        out: dict[str, int] = {}
        for gid, g in self.gpus.items():
            if not g.mode.takes_shares:
                continue
            if g.max_tenants is not None and self.tenants.get(gid, 0) >= g.max_tenants:
                continue
            free = self.gpu_free[gid]
            if free > out.get(g.model, 0):
                out[g.model] = free
        self._share = out
        return out

    def keys(self) -> list[tuple[str, str, int]]:
        """The shapes this node offers now, every registered kind's (`GpuKind.free_keys`)."""
        if not self.offered:
            return []
        keys: list[tuple[str, str, int]] = []
        for kind in kinds():
            keys += kind.free_keys(self)
        return keys

    def static_keys(self) -> list[tuple[str, str, int]]:
        """The shapes this node could offer when empty: for "no node offers this shape"."""
        if not self.offered:
            return []
        keys: list[tuple[str, str, int]] = []
        for kind in kinds():
            keys += kind.static_keys(self)
        return keys


class FreeIndex:
    """Nodes bucketed by the shapes they offer; every change goes through `put` / `drop`."""

    def __init__(self) -> None:
        self._nodes: dict[NodeId, NodeFree] = {}
        self._keys: dict[NodeId, list[tuple[str, str, int]]] = {}
        self._static: dict[NodeId, list[tuple[str, str, int]]] = {}
        self._buckets: dict[tuple[str, str], SortedDict] = {}
        self._totals: Counter[tuple[str, str]] = Counter()
        self._static_max: dict[tuple[str, str], Counter[int]] = {}
        self._rank: dict[NodeId, int] = {}
        self.version = 0
        """Bumped on every change."""

    def __len__(self) -> int:
        return len(self._nodes)

    def get(self, node: NodeId) -> NodeFree | None:
        return self._nodes.get(node)

    def nodes(self) -> Iterator[NodeFree]:
        return iter(self._nodes.values())

    def put(self, nf: NodeFree) -> None:
        old = self._nodes.get(nf.id)
        # a placement or release changes what a node has free, not what it is: its static shapes
        # stay counted when the node object and its schedulability are the ones already indexed
        same_node = old is not None and old.node is nf.node
        self._drop(nf.id, static=not same_node)
        self._nodes[nf.id] = nf
        self._rank.setdefault(nf.id, len(self._rank))
        keys = nf.keys()
        self._keys[nf.id] = keys
        buckets, totals = self._buckets, self._totals
        for kind, name, value in keys:
            bucket = buckets.get((kind, name))
            if bucket is None:
                bucket = buckets[(kind, name)] = SortedDict()
            members = bucket.get(value)
            if members is None:
                bucket[value] = {nf.id: None}
            else:
                members[nf.id] = None
            totals[(kind, name)] += value if sized(kind) else 1
        if not same_node:
            static = nf.static_keys()
            self._static[nf.id] = static
            for kind, name, value in static:
                self._static_max.setdefault((kind, name), Counter())[value] += 1
        self.version += 1

    def drop(self, node: NodeId) -> None:
        if node in self._nodes:
            self._drop(node, static=True)
            self.version += 1

    def _drop(self, node: NodeId, *, static: bool) -> None:
        if self._nodes.pop(node, None) is None:
            return
        buckets, totals = self._buckets, self._totals
        for kind, name, value in self._keys.pop(node, []):
            bucket = buckets[(kind, name)]
            members = bucket[value]
            del members[node]
            if not members:
                del bucket[value]
            totals[(kind, name)] -= value if sized(kind) else 1
        if not static:
            return
        for kind, name, value in self._static.pop(node, []):
            counter = self._static_max[(kind, name)]
            counter[value] -= 1
            if counter[value] <= 0:
                del counter[value]

    def rank(self, node: NodeId) -> int:
        """Default node priority: the order nodes first appeared in (the inventory's id order)."""
        return self._rank.get(node, len(self._rank))

    # ---- lookups -----------------------------------------------------------------------------
    def names(self, kind: str) -> list[str]:
        return sorted(name for (k, name), b in self._buckets.items() if k == kind and b)

    def static_names(self, kind: str) -> list[str]:
        return sorted(name for (k, name), c in self._static_max.items() if k == kind and c)

    def classes(self, kind: str, name: str, at_least: int) -> Iterator[tuple[int, dict[NodeId, None]]]:
        """Buckets of nodes offering `at_least` of a shape, smallest first (best-fit order)."""
        bucket = self._buckets.get((kind, name))
        if not bucket:
            return
        for value in bucket.irange(minimum=at_least):
            yield value, bucket[value]

    def largest(self, kind: str, name: str) -> int:
        bucket = self._buckets.get((kind, name))
        return bucket.peekitem(-1)[0] if bucket else 0

    def total(self, kind: str, name: str) -> int:
        """Free whole GPUs / MIG instances of a shape, or the number of GPUs with a free share."""
        return self._totals.get((kind, name), 0)

    def static_largest(self, kind: str, name: str) -> int:
        counter = self._static_max.get((kind, name))
        return max(counter) if counter else 0
