"""The re-layout controller with a fake Nomad and a fake clock: done, rolled back, resumed after a restart."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from nomad_gpu.domain.ids import NodeId
from nomad_gpu.domain.miglayout import MigGeometry, geometry_for, parse_layout
from nomad_gpu.domain.migplanner import MigAsk, MigGpu, MigInstance
from nomad_gpu.service.relayout.applyjob import apply_job_hcl
from nomad_gpu.service.relayout.controller import Phase, Record, RelayoutController, RelayoutSettings

MODEL = "NVIDIA H100 80GB HBM3"
_G = geometry_for(MODEL, [("3g.40gb", 4)])
assert _G is not None
H100: MigGeometry = _G
BEFORE = ["3g.40gb@0", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"]
AFTER = ["3g.40gb@0", "3g.40gb@4"]


def gpu(uuid: str, busy: tuple[int, ...], node: str = "n1") -> MigGpu:
    placed = parse_layout(",".join(BEFORE), H100)
    return MigGpu(NodeId(node), uuid, MODEL, H100,
                  tuple(MigInstance(f"MIG-{uuid}-{p.start}", p, p.start in busy) for p in placed))


@dataclass
class FakeNomad:
    registered: list[Record] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)
    layouts: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    node_status: str = "ready"
    refuse: bool = False

    def register_apply(self, record: Record) -> None:
        if self.refuse:
            raise RuntimeError("403 Permission denied")
        self.registered.append(record)

    def apply_status(self, record: Record) -> str | None:
        return self.status.get(record.job_id)

    def node_layout(self, node: str) -> tuple[str, dict[str, list[str]]] | None:
        return self.node_status, self.layouts.get(node, {})

    def stop(self, record: Record) -> None:
        self.stopped.append(record.job_id)


class Store:
    def __init__(self) -> None:
        self.value: str | None = None

    def save(self, v: str) -> None:
        self.value = v

    def load(self) -> str | None:
        return self.value


SETTINGS = RelayoutSettings(job_timeout_s=60, fingerprint_timeout_s=30, backoff_s=100, cool_down_s=0)


def controller(nomad: FakeNomad, store: Store, settings: RelayoutSettings = SETTINGS) -> RelayoutController:
    return RelayoutController(nomad, settings, load=store.load, save=store.save)


def setup() -> tuple[FakeNomad, Store, RelayoutController, list[MigGpu], list[MigAsk]]:
    nomad, store = FakeNomad(), Store()
    nomad.layouts["n1"] = {"GPU-a": list(BEFORE), "GPU-b": list(BEFORE)}
    return nomad, store, controller(nomad, store), [gpu("GPU-a", (0, 4)), gpu("GPU-b", (0,))], [MigAsk("e1", "3g.40gb")]


def test_a_relayout_is_done_only_once_nomads_node_shows_it() -> None:
    nomad, _, ctl, gpus, asks = setup()
    (rec,) = ctl.step(0.0, gpus, asks, names={"n1": "h100-mig-1"})
    assert rec.gpu == "GPU-b" and rec.layout == ",".join(AFTER) and nomad.registered == [rec]
    assert ctl.held() == {"n1": frozenset({"MIG-GPU-b-4", "MIG-GPU-b-5", "MIG-GPU-b-6"})}
    assert ctl.waiting_reason("e1", {"GPU-a": 0, "GPU-b": 1}) == "waiting for a MIG re-layout of GPU 1 on h100-mig-1"
    assert ctl.step(1.0, gpus, asks) == []  # one per node: the other GPU is not touched meanwhile
    nomad.status[rec.job_id] = "complete"
    ctl.step(2.0, gpus, asks)
    assert ctl.in_flight()[0].phase is Phase.FINGERPRINT and ctl.held()  # job done, Nomad has not seen it
    nomad.layouts["n1"]["GPU-b"] = list(AFTER)
    ctl.step(3.0, gpus, [])
    assert ctl.in_flight() == [] and ctl.held() == {} and ctl.records[-1].phase is Phase.DONE
    assert ctl.counts.done == 1 and nomad.stopped == [rec.job_id]
    # The ask is the cycle's now (it admits it onto the new 3g); a stale view plans nothing more for it.
    assert ctl.step(4.0, gpus, asks) == [] and ctl.step(64.0, gpus, asks) != []


@pytest.mark.parametrize(("event", "reason"), [
    pytest.param("failed", "apply job failed", id="job-fails"),
    pytest.param("lost", "apply job lost", id="job-lost"),
    pytest.param("timeout", "did not end within 60 s", id="job-hangs"),
    pytest.param("down", "node down", id="node-down"),
    pytest.param("no-fingerprint", "did not show the new layout within 30 s", id="fingerprint-never-changes"),
])
def test_failures_roll_back_hold_and_back_off(event: str, reason: str) -> None:
    nomad, _, ctl, gpus, asks = setup()
    (rec,) = ctl.step(0.0, gpus, asks)
    now = 1.0
    if event in ("failed", "lost"):
        nomad.status[rec.job_id] = event
    elif event == "timeout":
        nomad.status[rec.job_id], now = "running", 61.0
    elif event == "down":
        nomad.node_status = "down"
    else:
        nomad.status[rec.job_id] = "complete"
        ctl.step(1.0, gpus, asks)
        now = 32.0
    assert ctl.step(now, gpus, asks) == []  # rolled back, and GPU-b backs off (the only GPU that can help)
    last = ctl.records[0]
    assert last.phase is Phase.FAILED and reason in last.reason and last.reason.startswith("re-layout failed")
    assert ctl.held() == {} and rec.job_id in nomad.stopped and ctl.counts.failed == 1
    assert ctl.waiting_reason("e1") is None
    nomad.node_status = "ready"
    assert ctl.step(now + 99.0, gpus, asks) == []
    again = ctl.step(now + 100.0, gpus, asks)  # backoff over: tried again
    assert [r.gpu for r in again] == ["GPU-b"] and again[0].job_id != rec.job_id


def test_backoff_doubles_per_consecutive_failure() -> None:
    nomad, _, ctl, gpus, asks = setup()
    for now, wait in ((0.0, 100.0), (200.0, 200.0)):
        (rec,) = ctl.step(now, gpus, asks)
        nomad.status[rec.job_id] = "failed"
        ctl.step(now + 1, gpus, asks)
        assert ctl.backoff_until["GPU-b"] == now + 1 + wait


def test_register_refused_is_a_failure_not_a_hold() -> None:
    nomad, _, ctl, gpus, asks = setup()
    nomad.refuse = True
    assert ctl.step(0.0, gpus, asks) == []
    assert ctl.held() == {} and "not registered" in ctl.records[0].reason


def test_a_restarted_service_resumes_and_never_starts_a_second_one_on_the_node() -> None:
    nomad, store, ctl, gpus, asks = setup()
    (rec,) = ctl.step(0.0, gpus, asks)
    restarted = controller(nomad, store)
    assert [r.job_id for r in restarted.in_flight()] == [rec.job_id]
    assert restarted.step(1.0, gpus, [*asks, MigAsk("e2", "3g.40gb")]) == []  # the node is still busy
    nomad.status[rec.job_id] = "complete"
    nomad.layouts["n1"]["GPU-b"] = list(AFTER)
    restarted.step(2.0, gpus, [])
    restarted.step(3.0, gpus, [])
    assert restarted.records[-1].phase is Phase.DONE and len(nomad.registered) == 1


def test_cool_down_keeps_a_gpu_from_being_relaid_again_soon() -> None:
    nomad, store = FakeNomad(), Store()
    nomad.layouts["n1"] = {"GPU-b": list(BEFORE)}
    ctl = controller(nomad, store, RelayoutSettings(cool_down_s=600))
    (rec,) = ctl.step(0.0, [gpu("GPU-b", (0,))], [MigAsk("e1", "3g.40gb")])
    nomad.status[rec.job_id] = "complete"
    nomad.layouts["n1"]["GPU-b"] = list(AFTER)
    ctl.step(1.0, [], [])
    ctl.step(2.0, [], [])
    assert ctl.last_relayout_at == {"GPU-b": 2.0}
    assert ctl.step(500.0, [gpu("GPU-b", (0,))], [MigAsk("e9", "3g.40gb")]) == []
    assert len(ctl.step(602.0, [gpu("GPU-b", (0,))], [MigAsk("e9", "3g.40gb")])) == 1


def test_the_apply_job_is_pinned_batch_and_never_retried() -> None:
    hcl = apply_job_hcl("nomad-gpu-mig-relayout-x-1", "node-1", "GPU-b", ",".join(AFTER), ("MIG-1", "MIG-2"))
    assert 'attribute = "${node.unique.id}"' in hcl and 'value = "node-1"' in hcl and 'type = "batch"' in hcl
    assert '"--expect-idle", "MIG-1,MIG-2"' in hcl and "attempts = 0" in hcl
    with pytest.raises(ValueError, match="characters"):
        apply_job_hcl("j", "node-1", "GPU-b", "${attr.x}", ())
