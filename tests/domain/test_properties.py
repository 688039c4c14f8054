"""Properties of the whole core over random clusters and random sequences of operations.

Operations: submit, run a cycle, finish a running job (release), confirm it, node down, drain,
ineligible, node back, an instance going unhealthy. After every step an oracle written here, from
the test's own record of admissions and releases and the nodes' static capacity (never the
ledger's free index), checks that nothing is committed twice; admissions are checked against the
node and instance state at admission time, and against the nodes held for other jobs. The free
index the ledger keeps up to date move by move must equal one built from scratch after every step.
At the end everything is released, the index must equal a fresh ledger's, and a job asking for
the whole cluster must fit again. Running the same sequence twice must give the same decisions.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import cast

from hypothesis import event, given, settings
from hypothesis import strategies as st

from nomad_gpu.domain.cycle import Admit, CycleConfig, Wait, run_cycle
from nomad_gpu.domain.fairshare import UsageHistory
from nomad_gpu.domain.freeindex import FreeIndex, NodeFree
from nomad_gpu.domain.ids import MILLI_PER_GPU, EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Gpu, GpuMode, Inventory, MigSlice, Node, NodeStatus
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement, WaitReason
from nomad_gpu.domain.requests import AllocAsk, GpuShare, JobRequest, MigSlices, WholeGpus
from nomad_gpu.domain.units import MigProfile, split_mig_device_name

from .builders import A100, H100, L40S, config

MODELS = [A100, H100, L40S]
PROFILES = ["1g.10gb", "2g.20gb", "3g.40gb"]
POLICIES = ["first-fit", "best-fit", "frag-aware"]
QUOTAS = {"c": 3.0}
EPS = 1e-9

# ---- strategies ----------------------------------------------------------------------------------


@st.composite
def nodes(draw: st.DrawFn, name: str) -> Node:
    gpus: list[Gpu] = []
    k = 0
    for _ in range(draw(st.sampled_from([0, 1, 1, 2]))):  # whole-GPU groups
        model = draw(st.sampled_from(MODELS))
        for _ in range(draw(st.integers(1, 8))):
            gpus.append(Gpu(InstanceId(f"GPU-{name}-{k}"), model, 81_920))
            k += 1
    for _ in range(draw(st.integers(0, 2))):  # shared (rarely flex) GPUs
        mode = draw(st.sampled_from([GpuMode.SHARED, GpuMode.SHARED, GpuMode.FLEX]))
        model = draw(st.sampled_from(MODELS))
        slots = draw(st.sampled_from([None, None, 2, 3, 4]))  # N share instances (the device plugin's)
        if slots is None:
            gpus.append(Gpu(InstanceId(f"GPU-{name}-{k}"), model, 81_920, mode=mode,
                            max_tenants=draw(st.sampled_from([None, 2, 3]))))
        else:
            gpus.append(Gpu(InstanceId(f"GPU-{name}-{k}"), model, 81_920, mode=mode, max_tenants=slots,
                            share_ids=tuple(InstanceId(f"GPU-{name}-{k}-share-{j}") for j in range(slots)),
                            share_device=f"{model} ({slots} slots)"))
        k += 1
    migs: list[MigSlice] = []
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        profile = draw(st.sampled_from(PROFILES))
        for _ in range(draw(st.integers(1, 4))):
            migs.append(MigSlice(InstanceId(f"MIG-{name}-{k}"), H100, MigProfile.parse(profile), 10_240))
            k += 1
    return Node(NodeId(name), name=name, datacenter=draw(st.sampled_from(["dc1", "dc1", "dc2"])),
                node_pool=draw(st.sampled_from(["default", "default", "gpu"])),
                cpu_mhz=draw(st.sampled_from([8_000, 16_000, 64_000])),
                memory_mb=draw(st.sampled_from([16_000, 64_000])), gpus=tuple(gpus), migs=tuple(migs))


clusters = st.integers(1, 4).flatmap(lambda n: st.tuples(*(nodes(f"n{k}") for k in range(n))))

whole_asks = st.builds(WholeGpus, st.sampled_from([1, 1, 1, 2, 2, 3, 4, 8]),
                      st.sampled_from([frozenset(), frozenset(), frozenset({A100}), frozenset({H100, L40S})]))
gpu_asks = st.one_of(
    st.none(),
    whole_asks,
    whole_asks,
    st.builds(MigSlices, st.sampled_from(PROFILES), st.sampled_from([1, 1, 2])),
    st.builds(GpuShare, st.sampled_from([100, 250, 300, 500, 750, 1000]),
              st.sampled_from([frozenset(), frozenset(), frozenset({A100})])),
)


@st.composite
def job_specs(draw: st.DrawFn) -> dict[str, object]:
    asks = []
    for k in range(draw(st.sampled_from([1, 1, 1, 2]))):
        asks.append(AllocAsk(f"g{k}", 0, draw(st.sampled_from([0, 0, 1_000, 4_000, 12_000])),
                             draw(st.sampled_from([0, 0, 2_000, 8_000, 32_000])), draw(gpu_asks)))
    return {
        "asks": tuple(asks),
        "team": draw(st.sampled_from(["a", "b", "c"])),
        "priority": draw(st.sampled_from([10, 50, 50, 90])),
        "one_node": draw(st.booleans()),
        "datacenters": draw(st.sampled_from([frozenset(), frozenset(), frozenset(), frozenset({"dc2"})])),
        "node_pool": draw(st.sampled_from([None, None, None, None, "gpu"])),
    }


submit = st.tuples(st.just("submit"), job_specs())
run_a_cycle = st.tuples(st.just("cycle"), st.sampled_from([0.0, 60.0, 400.0]))
finish = st.tuples(st.just("finish"), st.integers(0, 99))
node_change = st.tuples(st.sampled_from(["down", "drain", "ineligible", "back", "back", "back"]), st.integers(0, 3))
ops = st.lists(
    st.one_of(
        submit, submit, submit, submit,
        run_a_cycle, run_a_cycle, run_a_cycle,
        finish, finish,
        st.tuples(st.just("confirm"), st.integers(0, 99)),
        node_change,
        st.tuples(st.just("sick"), st.tuples(st.integers(0, 3), st.integers(0, 40))),
    ),
    min_size=20,
    max_size=60,
)  # fmt: skip

# a busy cluster of 8-GPU nodes, mostly 1-GPU jobs and a few 8-GPU ones: fragmentation and holds
busy_clusters = st.integers(2, 4).map(lambda n: tuple(
    Node(NodeId(f"n{k}"), name=f"n{k}", cpu_mhz=64_000, memory_mb=512_000,
         gpus=tuple(Gpu(InstanceId(f"GPU-n{k}-{i}"), A100 if k else H100) for i in range(8)))
    for k in range(n)))
busy_jobs = st.fixed_dictionaries({
    "asks": st.sampled_from([1, 1, 1, 1, 1, 2, 8]).map(lambda c: (AllocAsk("g", 0, 1_000, 1_000, WholeGpus(c)),)),
    "team": st.sampled_from(["a", "b", "c"]),
    "priority": st.sampled_from([50, 50, 50, 90]),
})
busy_ops = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), busy_jobs), st.tuples(st.just("submit"), busy_jobs),
        st.tuples(st.just("cycle"), st.sampled_from([60.0, 400.0])),
        finish, finish,
        node_change,
    ),
    min_size=20,
    max_size=80,
)  # fmt: skip

# ---- the oracle ----------------------------------------------------------------------------------


@dataclass
class World:
    """The test's own books: the nodes as they are now, and what it saw admitted and released."""

    base: dict[NodeId, Node]
    now_nodes: dict[NodeId, Node]
    jobs: dict[EntryId, JobRequest] = field(default_factory=dict)
    live: dict[EntryId, tuple[AllocPlacement, ...]] = field(default_factory=dict)
    ever_admitted: set[EntryId] = field(default_factory=set)


def check_books(world: World, ledger: Ledger, cfg: CycleConfig) -> None:
    # the ledger holds exactly what the test saw admitted and not released
    assert {r.entry: r.placements for r in ledger.reservations()} == world.live
    cpu: Counter[NodeId] = Counter()
    mem: Counter[NodeId] = Counter()
    whole_use: Counter[InstanceId] = Counter()
    mig_use: Counter[InstanceId] = Counter()
    share_milli: Counter[InstanceId] = Counter()
    share_tenants: Counter[InstanceId] = Counter()
    slot_use: Counter[InstanceId] = Counter()
    team_use: defaultdict[str, float] = defaultdict(float)
    for entry, placements in world.live.items():
        job = world.jobs[entry]
        for p in placements:
            node = world.base[p.node]
            cpu[p.node] += p.cpu_mhz
            mem[p.node] += p.memory_mb
            gpus = {g.id: g for g in node.gpus}
            migs = {m.id: m for m in node.migs}
            if p.is_share:
                gid = p.shared_gpu
                assert gid in gpus and gpus[gid].mode.takes_shares, f"{entry}: share on {gid}"
                if gpus[gid].share_ids:  # pinned to share instances: ceil(M / slot) of that one GPU
                    assert p.share_gpu == gid and p.device_name == gpus[gid].share_device
                    assert set(p.instance_ids) <= set(gpus[gid].share_ids), f"{entry}: {p.instance_ids}"
                    assert len(set(p.instance_ids)) == gpus[gid].instances_for(p.share_milli)
                    slot_use.update(p.instance_ids)
                else:
                    assert p.instance_ids == (gid,)
                share_milli[gid] += p.share_milli
                share_tenants[gid] += 1
            else:
                for iid in p.instance_ids:
                    if iid in gpus:
                        assert gpus[iid].mode.takes_whole, f"{entry}: whole use of shared {iid}"
                        whole_use[iid] += 1
                    else:
                        assert iid in migs, f"{entry}: {iid} is no instance of {p.node}"
                        assert migs[iid].device_name == p.device_name
                        mig_use[iid] += 1
        team_use[job.team] += sum(a.gpu_equivalents for a in job.asks)
    for n, node in world.base.items():
        assert cpu[n] <= node.cpu_mhz, f"{n}: {cpu[n]} MHz committed of {node.cpu_mhz}"
        assert mem[n] <= node.memory_mb, f"{n}: {mem[n]} MB committed of {node.memory_mb}"
        for g in node.gpus:
            assert whole_use[g.id] <= 1, f"{g.id} committed {whole_use[g.id]} times"
            assert not (whole_use[g.id] and share_tenants[g.id]), f"{g.id} both whole and shared"
            assert share_milli[g.id] <= MILLI_PER_GPU, f"{g.id}: {share_milli[g.id]} milli"
            if g.max_tenants is not None:
                assert share_tenants[g.id] <= g.max_tenants, f"{g.id}: {share_tenants[g.id]} tenants"
            for sid in g.share_ids:
                assert slot_use[sid] <= 1, f"share instance {sid} committed {slot_use[sid]} times"
                assert not (slot_use[sid] and whole_use[g.id]), f"{sid} shared while {g.id} is whole"
        for m in node.migs:
            assert mig_use[m.id] <= 1, f"{m.id} committed {mig_use[m.id]} times"
    for team, used in team_use.items():
        quota = cfg.fair.team(Team(team)).quota_gpu
        if quota is not None:
            assert used <= quota + EPS, f"team {team} holds {used} of quota {quota}"


def check_index(world: World, ledger: Ledger) -> None:
    """The ledger's incrementally kept free index equals one built from scratch from the test's books."""
    fresh = FreeIndex()
    for n, node in world.now_nodes.items():
        fresh.put(NodeFree.of(node, [p for ps in world.live.values() for p in ps if p.node == n]))
    for n in world.now_nodes:
        kept, built = ledger.node_free(n), fresh.get(n)
        assert kept is not None and built is not None
        assert node_state(kept) == node_state(built), f"{n}: free index out of date"
        assert sorted(kept.keys()) == sorted(built.keys())
    for kind in ("whole", "mig", "share"):
        assert ledger.index.names(kind) == fresh.names(kind)
        assert ledger.index.static_names(kind) == fresh.static_names(kind)
        for name in fresh.names(kind):
            assert ledger.index.total(kind, name) == fresh.total(kind, name), f"{kind} {name}: total"
            assert ledger.index.largest(kind, name) == fresh.largest(kind, name), f"{kind} {name}: largest"
            assert [sorted(m) for _, m in ledger.index.classes(kind, name, 0)] == [
                sorted(m) for _, m in fresh.classes(kind, name, 0)], f"{kind} {name}: classes"
        for name in fresh.static_names(kind):
            assert ledger.index.static_largest(kind, name) == fresh.static_largest(kind, name)


def node_state(nf: NodeFree) -> tuple[object, ...]:
    return (nf.cpu_free, nf.mem_free, dict(nf.gpu_free), {k: v for k, v in nf.tenants.items() if v},
            {k: list(v) for k, v in nf.mig_free.items() if v}, nf.offered, nf.whole_free(), nf.share_free(),
            {k: list(v) for k, v in nf.slot_free.items()})


def check_admission(world: World, d: Admit) -> None:
    """What was just admitted fits its asks and sits on schedulable nodes and healthy instances."""
    job = world.jobs[d.entry]
    assert d.entry not in world.ever_admitted, f"{d.entry} admitted twice"
    assert len(d.placements) == len(job.asks)
    if job.one_node:
        assert len({p.node for p in d.placements}) == 1
    for a, p in zip(job.asks, d.placements, strict=True):
        node = world.now_nodes[p.node]
        assert node.schedulable, f"{d.entry} placed on unschedulable {p.node}"
        assert not job.datacenters or node.datacenter in job.datacenters
        assert job.node_pool is None or node.node_pool == job.node_pool
        assert (p.group, p.index, p.cpu_mhz, p.memory_mb) == (a.group, a.index, a.cpu_mhz, a.memory_mb)
        gpus = {g.id: g for g in node.gpus}
        migs = {m.id: m for m in node.migs}
        slots = {sid: g for g in node.gpus for sid in g.share_ids}
        for iid in p.instance_ids:
            inst = gpus.get(iid) or migs.get(iid) or slots.get(iid)
            assert inst is not None and inst.healthy, f"{d.entry} placed on unhealthy {iid}"
        g = a.gpu
        if g is None:
            assert p.instance_ids == () and not p.is_share
        elif isinstance(g, WholeGpus):
            assert len(p.instance_ids) == g.count and not p.is_share
            assert {gpus[i].model for i in p.instance_ids} == {p.device_name}
            assert g.allows(p.device_name or "")
        elif isinstance(g, MigSlices):
            split = split_mig_device_name(p.device_name or "")
            assert split is not None and split[1] == g.profile and len(p.instance_ids) == g.count
        else:
            assert isinstance(g, GpuShare)
            shared = gpus[p.shared_gpu or InstanceId("")]
            assert p.share_milli == g.milli and g.allows(shared.model)
            assert len(p.instance_ids) == (shared.instances_for(g.milli) if shared.share_ids else 1)


def check_holds(holds_in: dict[EntryId, frozenset[NodeId]], decisions: tuple[Admit | Wait, ...],
                holds_out: dict[EntryId, frozenset[NodeId]]) -> None:
    """No admission lands on a node held for another job at the time of the admission."""
    active = {e: ns for e, ns in holds_in.items() if holds_out.get(e) == ns}
    for d in decisions:
        if isinstance(d, Wait) and d.reason is WaitReason.HELD:
            active[d.entry] = holds_out[d.entry]
        if isinstance(d, Admit):
            used = {p.node for p in d.placements}
            for e, ns in active.items():
                assert e == d.entry or not used & ns, f"{d.entry} placed on {sorted(used & ns)} held for {e}"


# ---- the interpreter -----------------------------------------------------------------------------


def run(cluster: tuple[Node, ...], steps: list[tuple[str, object]], policy: str, max_holds: int,
        *, check: bool = True) -> Iterator[object]:
    """Apply `steps`; yield every decision (for the determinism check); check the oracle as it goes."""
    cfg = replace(config(policy, quotas=QUOTAS, weights={"b": 2.0}, hol=300.0, max_holds=max_holds),
                  per_class_limit=2)
    base = {n.id: n for n in cluster}
    world = World(base, dict(base))
    ledger = Ledger(Inventory.of(cluster))
    queue: dict[EntryId, JobRequest] = {}
    holds: dict[EntryId, frozenset[NodeId]] = {}
    usage = UsageHistory()
    now = 0.0
    seq = 0
    ids = sorted(base)

    def set_node(node: Node) -> None:
        world.now_nodes[node.id] = node
        ledger.set_node(node)

    for op, arg in steps:
        if op == "submit":
            spec = dict(arg)  # type: ignore[call-overload]
            job = JobRequest(EntryId(f"j{seq}"), Team(spec.pop("team")), spec.pop("asks"), submitted_at=now,
                             **spec)
            seq += 1
            queue[job.entry] = job
            world.jobs[job.entry] = job
        elif op == "cycle":
            now += float(arg)  # type: ignore[arg-type]
            usage = usage.advance(now, ledger.team_usage(), cfg.fair.half_life_s)
            holds_in = dict(holds)
            result = run_cycle(ledger, list(queue.values()), now=now, config=cfg, usage=usage, holds=holds)
            holds = dict(result.holds)
            yield result.decisions, sorted(holds.items())
            assert {d.entry for d in result.decisions} == set(queue)
            for d in result.decisions:
                event(f"decision: {'admit' if isinstance(d, Admit) else d.reason.name}")
            for d in result.admitted:
                if check:
                    check_admission(world, d)
                world.ever_admitted.add(d.entry)
                world.live[d.entry] = d.placements
                del queue[d.entry]
            if check:
                check_holds(holds_in, result.decisions, holds)
        elif op in ("finish", "confirm"):
            if world.live:
                entry = sorted(world.live)[int(arg) % len(world.live)]  # type: ignore[call-overload]
                if op == "confirm":
                    ledger.confirm(entry)
                else:
                    released = ledger.release(entry)
                    assert released is not None and ledger.release(entry) is None
                    del world.live[entry]
        elif op in ("down", "drain", "ineligible", "back"):
            n = ids[int(arg) % len(ids)]  # type: ignore[call-overload]
            node = world.now_nodes[n]
            set_node({"down": replace(node, status=NodeStatus.DOWN), "drain": replace(node, draining=True),
                      "ineligible": replace(node, eligible=False), "back": base[n]}[op])
        elif op == "sick":
            ni, k = cast(tuple[int, int], arg)
            n = ids[ni % len(ids)]
            node = world.now_nodes[n]
            insts: list[Gpu | MigSlice] = [*node.gpus, *node.migs]
            if insts:
                target = insts[k % len(insts)].id
                set_node(replace(node, gpus=tuple(replace(g, healthy=g.healthy and g.id != target)
                                                  for g in node.gpus),
                                 migs=tuple(replace(m, healthy=m.healthy and m.id != target) for m in node.migs)))
        if check:
            check_books(world, ledger, cfg)
            check_index(world, ledger)

    if not check:
        return
    # ---- everything released is reusable ----
    for n in ids:
        set_node(base[n])
    for entry in sorted(world.live):
        ledger.release(entry)
    world.live.clear()
    fresh = Ledger(Inventory.of(cluster))
    for n in ids:
        assert free_state(ledger, n) == free_state(fresh, n), f"{n} did not come back whole"
    check_index(world, ledger)
    for kind in ("whole", "mig", "share"):
        assert ledger.index.names(kind) == fresh.index.names(kind)
        for name in fresh.index.names(kind):
            assert ledger.index.total(kind, name) == fresh.index.total(kind, name)
            assert ledger.index.largest(kind, name) == fresh.index.largest(kind, name)
    everything = whole_cluster_job(cluster)
    if everything is not None:
        world.jobs[everything.entry] = everything
        result = run_cycle(ledger, [everything], now=now + 1, config=replace(cfg, policy="first-fit"))
        assert result.admitted, f"the whole cluster does not fit after releasing everything: {result.decisions}"
        check_admission(world, result.admitted[0])
        world.live[everything.entry] = result.admitted[0].placements
        check_books(world, ledger, cfg)


def free_state(ledger: Ledger, node: NodeId) -> tuple[object, ...]:
    nf = ledger.node_free(node)
    assert nf is not None
    return (nf.cpu_free, nf.mem_free, dict(nf.gpu_free), {k: v for k, v in nf.tenants.items() if v},
            {k: list(v) for k, v in nf.mig_free.items() if v}, nf.offered)


def whole_cluster_job(cluster: tuple[Node, ...]) -> JobRequest | None:
    """One gang asking for every GPU, MIG instance and shared GPU of the cluster, biggest first."""
    whole: list[AllocAsk] = []
    migs: list[AllocAsk] = []
    shares: list[AllocAsk] = []
    for node in cluster:
        per_model = Counter(g.model for g in node.gpus if g.mode.takes_whole)
        for model, n in per_model.items():
            whole.append(AllocAsk("w", 0, 0, 0, WholeGpus(n, frozenset({model}))))
        per_profile = Counter(m.profile.name for m in node.migs)
        for profile, n in per_profile.items():
            migs.append(AllocAsk("m", 0, 0, 0, MigSlices(profile, n)))
        for g in node.gpus:
            if g.mode is GpuMode.SHARED:
                shares.append(AllocAsk("s", 0, 0, 0, GpuShare(MILLI_PER_GPU, frozenset({g.model}))))
    def count(a: AllocAsk) -> int:
        assert isinstance(a.gpu, WholeGpus | MigSlices)
        return -a.gpu.count

    asks = sorted(whole, key=count) + sorted(migs, key=count) + shares
    asks = [replace(a, group=f"{a.group}{k}") for k, a in enumerate(asks)]
    if not asks:
        return None
    return JobRequest(EntryId("everything"), Team("z"), tuple(asks))


# ---- the properties ------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(cluster=clusters, steps=ops, policy=st.sampled_from(POLICIES), max_holds=st.sampled_from([1, 2]))
def test_never_oversubscribed_and_released_capacity_is_reusable(
    cluster: tuple[Node, ...], steps: list[tuple[str, object]], policy: str, max_holds: int
) -> None:
    for _ in run(cluster, steps, policy, max_holds):
        pass


@settings(max_examples=100, deadline=None)
@given(cluster=busy_clusters, steps=busy_ops, policy=st.sampled_from(POLICIES), max_holds=st.sampled_from([1, 2]))
def test_never_oversubscribed_on_a_busy_whole_gpu_cluster(
    cluster: tuple[Node, ...], steps: list[tuple[str, object]], policy: str, max_holds: int
) -> None:
    for _ in run(cluster, steps, policy, max_holds):
        pass


@settings(max_examples=40, deadline=None)
@given(cluster=clusters, steps=ops, policy=st.sampled_from(POLICIES))
def test_same_sequence_same_decisions(cluster: tuple[Node, ...], steps: list[tuple[str, object]],
                                      policy: str) -> None:
    first = list(run(cluster, steps, policy, 1, check=False))
    second = list(run(cluster, steps, policy, 1, check=False))
    assert first == second
