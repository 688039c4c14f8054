"""The cycle's side of re-layouts: held instances leave the ledger's offer and come back; reasons; steps when due."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from test_relayout import FakeNomad, Store

from nomad_gpu.devcluster import parse_cluster
from nomad_gpu.devcluster.inventory import build_nodes
from nomad_gpu.domain.ids import EntryId, NodeId, Team
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.requests import AllocAsk, JobRequest, MigSlices, WholeGpus
from nomad_gpu.nomad.decode import decode_node
from nomad_gpu.service.relayout.controller import Phase, RelayoutController, RelayoutSettings
from nomad_gpu.service.relayout.loop import RelayoutLoop

LAYOUT = ["3g.40gb@0", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"]
SPEC = {"name": "m", "nodes": [{"name": "h100-mig-1", "device_plugin": "nomad-gpu",
                                "meta": {"nomad_gpu_mig_relayout": "true"},
                                "gpus": [{"model": "NVIDIA H100 80GB HBM3", "count": 2, "memory_mib": 81920,
                                          "mig": LAYOUT}]}]}


class Inline:
    """An executor that runs at once (the worker's step, in the test's thread)."""

    def __init__(self) -> None:
        self.calls = 0

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        self.calls += 1
        fn(*args)
        done: Future[Any] = Future()
        done.set_result(None)
        return done


class FakeClient:
    def __init__(self, node: dict[str, Any], busy: list[str]) -> None:
        self.raw = node
        self.busy = busy

    def node(self, node_id: str) -> dict[str, Any]:
        return self.raw

    def allocations(self) -> list[dict[str, Any]]:
        return [{"ID": f"a{k}", "ClientStatus": "running", "AllocatedResources": {"Tasks": {"t": {
            "Devices": [{"Name": "x", "DeviceIDs": [i]}]}}}} for k, i in enumerate(self.busy)]


def setup() -> tuple[Ledger, RelayoutLoop, FakeNomad, Inline, dict[str, dict[str, str]], list[JobRequest]]:
    (dev,) = build_nodes(parse_cluster(SPEC))
    ids = {g.uuid: {str(i): i.id for i in g.instances} for g in dev.mig_gpus}
    g0, g1 = sorted(ids)
    raw = dev.to_json()
    ledger = Ledger()
    ledger.set_node(decode_node(raw))
    nomad = FakeNomad()
    nomad.layouts[dev.id] = {g0: list(LAYOUT), g1: list(LAYOUT)}
    store = Store()
    controller = RelayoutController(nomad, RelayoutSettings(cool_down_s=0), load=store.load, save=store.save)
    executor = Inline()
    client = FakeClient(raw, [ids[g0]["3g.40gb@0"], ids[g1]["3g.40gb@0"], ids[g0]["1g.10gb@4"]])
    clock = iter(range(100, 10_000)).__next__
    loop = RelayoutLoop(controller, client, executor=executor, clock=lambda: float(clock()),  # type: ignore[arg-type]
                        interval_s=5.0)
    waiting = [JobRequest(EntryId("e-3g"), Team("t"), (AllocAsk("g", gpu=MigSlices("3g.40gb")),))]
    return ledger, loop, nomad, executor, ids, waiting


def healthy(ledger: Ledger) -> dict[str, bool]:
    (node,) = ledger.inventory
    return {m.id: m.healthy for m in node.migs}


def test_held_instances_leave_the_offer_until_the_relayout_ends() -> None:
    ledger, loop, nomad, executor, ids, waiting = setup()
    g0, g1 = sorted(ids)
    loop.before_cycle(ledger)
    reasons = loop.after_cycle(0.0, waiting, ledger.index.nodes())
    assert executor.calls == 1 and len(nomad.registered) == 1
    assert reasons == {"e-3g": "waiting for a MIG re-layout of GPU 1 on h100-mig-1"}  # the inline step ran
    loop.before_cycle(ledger)
    idle = {ids[g1][p] for p in ("1g.10gb@4", "1g.10gb@5", "1g.10gb@6")}
    assert {i for i, ok in healthy(ledger).items() if not ok} == idle
    reason = {"e-3g": "waiting for a MIG re-layout of GPU 1 on h100-mig-1"}
    assert loop.after_cycle(1.0, waiting, ledger.index.nodes()) == reason
    assert executor.calls == 1  # not due yet (every 5 s)
    (record,) = nomad.registered
    nomad.status[record.job_id] = "complete"
    loop.after_cycle(6.0, waiting, ledger.index.nodes())
    nomad.layouts[record.node][g1] = ["3g.40gb@0", "3g.40gb@4"]
    loop.after_cycle(12.0, waiting, ledger.index.nodes())
    assert loop.controller.records[-1].phase is Phase.DONE
    loop.before_cycle(ledger)
    assert all(healthy(ledger).values())  # restored (Nomad's node update would replace them anyway)
    assert loop.after_cycle(13.0, waiting, ledger.index.nodes()) == {}


def test_nothing_is_fetched_without_mig_asks_or_relayouts() -> None:
    ledger, loop, _, executor, _, _ = setup()
    loop.before_cycle(ledger)
    whole = [JobRequest(EntryId("w"), Team("t"), (AllocAsk("g", gpu=WholeGpus(1)),))]
    assert loop.after_cycle(0.0, whole, ledger.index.nodes()) == {} and executor.calls == 0
    assert ledger.inventory.nodes[NodeId(next(iter(ledger.inventory.nodes)))].migs


def test_metrics_count_relayouts_by_outcome() -> None:
    from prometheus_client import CollectorRegistry

    from nomad_gpu.service.relayout.loop import RelayoutCollector
    ledger, loop, nomad, _, _, waiting = setup()
    registry = CollectorRegistry()
    registry.register(RelayoutCollector(loop))
    loop.before_cycle(ledger)
    loop.after_cycle(0.0, waiting, ledger.index.nodes())
    assert registry.get_sample_value("nomad_gpu_mig_relayouts_total", {"outcome": "started"}) == 1
    assert registry.get_sample_value("nomad_gpu_mig_relayouts_in_flight") == 1
    (record,) = nomad.registered
    nomad.status[record.job_id] = "failed"
    loop.after_cycle(6.0, waiting, ledger.index.nodes())
    assert registry.get_sample_value("nomad_gpu_mig_relayouts_total", {"outcome": "failed"}) == 1
    assert registry.get_sample_value("nomad_gpu_mig_relayouts_in_flight") == 0


def test_no_relayout_on_a_node_without_the_job_s_cpu_free() -> None:
    """The planner is asked only for nodes with the job's CPU and memory free beside the new instance."""
    ledger, loop, nomad, executor, _, _ = setup()
    (node,) = ledger.inventory
    hungry = [JobRequest(EntryId("e-3g"), Team("t"),
                         (AllocAsk("g", cpu_mhz=node.cpu_mhz + 1, gpu=MigSlices("3g.40gb")),))]
    loop.before_cycle(ledger)
    assert loop.after_cycle(0.0, hungry, ledger.index.nodes()) == {}
    assert nomad.registered == []
    fits = [JobRequest(EntryId("e-3g"), Team("t"), (AllocAsk("g", cpu_mhz=node.cpu_mhz, gpu=MigSlices("3g.40gb")),))]
    assert loop.after_cycle(6.0, fits, ledger.index.nodes()) and len(nomad.registered) == 1 and executor.calls == 2
