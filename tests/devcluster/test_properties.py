"""Properties of the dev cluster's own accounting, driven directly on the state (no HTTP, no timers):
whatever the sequence of registers, finishes, stops and node failures, no device instance is ever
held twice, the ledger matches the live allocations, pins are honoured, and a job never has two
live copies of one allocation."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nomad_gpu.devcluster import parse_cluster
from nomad_gpu.devcluster.events import EventBroker
from nomad_gpu.devcluster.runner import TimerHeap
from nomad_gpu.devcluster.state import ClusterState

CLUSTER = parse_cluster({"name": "prop", "nodes": [
    {"name": "n1", "cpu_shares": 20000, "memory_mb": 65536, "gpus": [
        {"model": "NVIDIA A100-SXM4-80GB", "count": 3, "memory_mib": 81920},
        {"model": "NVIDIA A100-SXM4-80GB", "count": 1, "memory_mib": 81920, "mig": ["3g.40gb", "3g.40gb"]}]},
    {"name": "n2", "cpu_shares": 20000, "memory_mb": 65536, "gpus": [
        {"model": "NVIDIA H100 80GB HBM3", "count": 2, "memory_mib": 81920}]},
]})


def _state() -> ClusterState:
    # The timer heap is never started: the test moves allocations itself, deterministically.
    return ClusterState(CLUSTER, EventBroker(16), TimerHeap(), speed=1.0)


def _all_ids(state: ClusterState) -> list[str]:
    return [i for node in state.nodes.values() for group in node.groups for i in group.ids]


def _job(job_id: str, gpus: int, count: int, pin: list[str] | None, node: str | None) -> dict[str, Any]:
    device: dict[str, Any] = {"Name": "nvidia/gpu", "Count": gpus}
    if pin:
        device["Constraints"] = [{"LTarget": "${device.ids}", "RTarget": ",".join(pin),
                                  "Operand": "set_contains_any"}]
    job: dict[str, Any] = {"ID": job_id, "Type": "batch", "Datacenters": ["dc1"], "TaskGroups": [{
        "Name": "g", "Count": count, "ReschedulePolicy": {"Attempts": 0, "Unlimited": False},
        "Tasks": [{"Name": "t", "Driver": "exec", "Resources": {"CPU": 1000, "MemoryMB": 1024,
                                                                 "Devices": [device] if gpus else None}}]}]}
    if node is not None:
        job["Constraints"] = [{"LTarget": "${node.unique.id}", "RTarget": node, "Operand": "="}]
    return job


_ops = st.one_of(
    st.tuples(st.just("register"), st.integers(0, 4), st.integers(0, 3), st.integers(1, 2),
              st.none() | st.lists(st.integers(0, 6), min_size=1, max_size=3), st.none() | st.integers(0, 1)),
    st.tuples(st.just("finish"), st.integers(0, 30)),
    st.tuples(st.just("stop"), st.integers(0, 30)),
    st.tuples(st.just("deregister"), st.integers(0, 4)),
    st.tuples(st.just("down"), st.integers(0, 1)),
    st.tuples(st.just("up"), st.integers(0, 1)),
)


def _apply(state: ClusterState, op: tuple[Any, ...]) -> None:
    ids, nodes = _all_ids(state), list(state.nodes)
    kind = op[0]
    live = list(state.live)  # creation order: alloc IDs are random, so never sort by them
    if kind == "register":
        _, job, gpus, count, pin, node = op
        pinned = None if pin is None else [ids[i] for i in pin]
        state.register(_job(f"job-{job}", gpus, count, pinned, None if node is None else nodes[node]), None,
                       "default")
    elif kind == "finish" and live:
        alloc_id = live[op[1] % len(live)]
        state.on_start(alloc_id)
        state.on_finish(alloc_id)
    elif kind == "stop" and live:
        state.stop_alloc(live[op[1] % len(live)])
    elif kind == "deregister":
        state.deregister("default", f"job-{op[1]}", purge=op[1] % 2 == 0)
    elif kind in ("down", "up"):
        state.set_node_status(nodes[op[1]], "down" if kind == "down" else "ready")


def _check(state: ClusterState) -> None:
    # Every write settles its evaluations: what waits sits in a blocked one, nothing stays pending,
    # and a blocked evaluation with nothing left to place has completed (scheduler/generic_sched.go).
    assert all(state.evals[i].status == "blocked" for i in state.open_evals), "an evaluation left pending"
    assert {p.eval_id for p in state.pending} == set(state.open_evals), "pending work outside its blocked eval"
    live = list(state.live.values())
    held = [i for alloc in live for i in alloc.device_ids]
    assert len(held) == len(set(held)), "an instance is held by two live allocations"
    assert state.ledger.held() == {i: alloc.id for alloc in live for i in alloc.device_ids}
    assert all(alloc.live for alloc in live) and all(a.id in state.live for a in state.allocs.values() if a.live)
    copies = Counter((a.job_id, a.job_create_index, a.task_group, a.name_index) for a in live
                     if a.desired_status == "run")
    assert max(copies.values(), default=1) == 1, "two live copies of one allocation"
    for alloc in live:
        node = state.nodes[alloc.node_id]
        assert set(alloc.device_ids) <= {i for group in node.groups for i in group.ids}
        for choice in alloc.devices:  # one request, one group
            assert set(choice.ids) <= set(choice.group.ids)
        # Pins hold against the job version that placed the allocation.
        if alloc.job["TaskGroups"][0]["Tasks"][0]["Resources"].get("Devices"):
            device = alloc.job["TaskGroups"][0]["Tasks"][0]["Resources"]["Devices"][0]
            for constraint in device.get("Constraints") or []:
                assert set(alloc.device_ids) <= set(constraint["RTarget"].split(","))
    for node_id, node in state.nodes.items():
        used = sum(t.cpu for a in live if a.node_id == node_id for t in a.tasks)
        assert used <= node.usable_cpu


@settings(max_examples=80, deadline=None)
@given(st.lists(_ops, max_size=40))
def test_never_double_booked_and_ledger_matches(ops: list[tuple[Any, ...]]) -> None:
    state = _state()
    for op in ops:
        _apply(state, op)
        _check(state)


@settings(max_examples=30, deadline=None)
@given(st.lists(_ops, max_size=30))
def test_released_devices_are_reusable(ops: list[tuple[Any, ...]]) -> None:
    state = _state()
    for op in ops:
        _apply(state, op)
    for job in range(5):
        state.deregister("default", f"job-{job}", purge=True)
    for node in list(state.nodes):
        state.set_node_status(node, "ready")
    assert state.live == {} and state.ledger.held() == {}
    state.register(_job("everything", 3, 1, None, list(state.nodes)[0]), None, "default")
    state.register(_job("everything-else", 2, 1, None, list(state.nodes)[1]), None, "default")
    assert len(state.live) == 2 and state.pending == []


def test_same_input_same_decisions() -> None:
    ops = [("register", 0, 2, 2, None, None), ("register", 1, 1, 1, [3, 4], 0), ("finish", 0),
           ("register", 2, 3, 1, None, 1), ("down", 0), ("up", 0)]

    def run() -> list[tuple[str, str, tuple[str, ...]]]:
        state = _state()
        for op in ops:
            _apply(state, op)
        return [(a.job_id, a.node_id, tuple(a.device_ids)) for a in state.allocs.values()]

    assert run() == run()
