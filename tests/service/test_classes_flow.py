"""A class's choice through the service with a fake Nomad: the core picks the first tier with a feasible
option, the choice is stored with the attempt and explained, the rendered job names the chosen kind, and a
waiting entry says why no tier fits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fakes import Clock, FakeNomad, ManualExecutor

from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.inventory import Gpu, GpuMode, MigSlice, Node
from nomad_gpu.domain.units import MigProfile
from nomad_gpu.render import JobSpec, RenderPlacement, render_job
from nomad_gpu.render.hcl import parse_hcl
from nomad_gpu.service.config.classconfig import classes_from_mapping
from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, QueueEntry, SqliteStore

H100 = "NVIDIA H100 80GB HBM3"
L40S = "NVIDIA L40S"


@dataclass
class RecordingNomad(FakeNomad):  # type: ignore[misc]  # `fakes` is imported by its bare name: Any to mypy
    sent: dict[str, tuple[JobSpec, RenderPlacement]] = field(default_factory=dict)

    def submit(self, entry: QueueEntry, spec: JobSpec, placement: RenderPlacement) -> str:
        self.sent[entry.name] = (spec, placement)
        return super().submit(entry, spec, placement)


def mig_node() -> Node:
    migs = (MigSlice(InstanceId("MIG-m-3g"), H100, MigProfile.parse("3g.40gb"), 40448, pci_bus_id="b0"),
            MigSlice(InstanceId("MIG-m-1g"), H100, MigProfile.parse("1g.10gb"), 9984, pci_bus_id="b0"))
    return Node(NodeId("m"), name="h100-mig-1", cpu_mhz=64_000, memory_mb=512_000, migs=migs)


def whole_node() -> Node:
    gpus = (Gpu(InstanceId("GPU-w-0"), H100, 81920),)
    return Node(NodeId("w"), name="h100-1", cpu_mhz=64_000, memory_mb=512_000, gpus=gpus)


def shared_node() -> Node:
    gpu = Gpu(InstanceId("GPU-s-0"), L40S, 46068, mode=GpuMode.SHARED, max_tenants=4,
              share_ids=tuple(InstanceId(f"GPU-s-0-share-{k}") for k in range(4)), share_device=L40S)
    return Node(NodeId("s"), name="l40s-1", cpu_mhz=64_000, memory_mb=512_000, gpus=(gpu,))


def started(*nodes: Node, classes: dict[str, Any] | None = None) -> tuple[SchedulerService, RecordingNomad,
                                                                         ManualExecutor]:
    nomad, ex = RecordingNomad(), ManualExecutor()
    settings = SchedulingSettings(tick_s=0.01, classes=classes_from_mapping(classes))
    svc = SchedulerService(SqliteStore(), nomad, settings, clock=Clock(), executor=ex)
    svc.on_resync(list(nodes), [])
    return svc, nomad, ex


def job(name: str, text: str) -> dict[str, Any]:
    import yaml

    return {"name": name, "team": "t", "task": {"image": "busybox"}, **yaml.safe_load(text)}


def run(svc: SchedulerService, ex: ManualExecutor) -> None:
    svc.run_cycle()
    ex.run_all()


def test_serving_takes_a_mig_instance_that_holds_it_then_a_whole_gpu_never_a_share() -> None:
    svc, nomad, ex = started(mig_node(), whole_node(), shared_node())
    first = svc.submit(job("serve-a", "class: serving\ngpu_memory: 14GiB\n"))[0]
    run(svc, ex)
    second = svc.submit(job("serve-b", "class: serving\ngpu_memory: 14GiB\n"))[0]
    run(svc, ex)
    third = svc.submit(job("serve-c", "class: serving\ngpu_memory: 14GiB\n"))[0]
    run(svc, ex)
    a, b, c = (svc.store.get(e.id) for e in (first, second, third))
    assert a.placements[0]["instance_ids"] == ["MIG-m-3g"]  # the 1g.10gb (9.75 GiB) does not hold 14
    assert a.placements[0]["choice"] == "serving -> MIG 3g.40gb on h100-mig-1: needs 14 GiB; isolated; tier 1"
    assert b.placements[0]["instance_ids"] == ["GPU-w-0"]
    assert b.placements[0]["choice"] == f"serving -> whole GPU {H100} on h100-1: needs 14 GiB; isolated; tier 2"
    assert c.state is EntryState.QUEUED
    assert c.reason == "serving: no isolated option with >= 14 GiB free; 4 shares free; 1 MIG instance too small"
    spec, placement = nomad.sent["serve-a"]
    assert spec.groups[0].mig is not None and spec.groups[0].mig.profile == "3g.40gb"
    source = render_job(spec, job_id="j", placement=placement)
    assert f'device "nvidia/gpu/{H100} MIG 3g.40gb"' in source
    parse_hcl(source)


def test_exploratory_takes_a_share_sized_to_whole_slots() -> None:
    svc, nomad, ex = started(mig_node(), whole_node(), shared_node())
    (e,) = svc.submit(job("explore", "class: exploratory\ngpu_memory: 12GiB\n"))
    run(svc, ex)
    stored = svc.store.get(e.id)
    p = stored.placements[0]
    assert p["share_gpu"] == "GPU-s-0" and p["share_milli"] == 500 and len(p["instance_ids"]) == 2
    assert p["choice"] == f"exploratory -> share 500/1000 of {L40S} on l40s-1: needs 12 GiB; time-shared; tier 1"
    spec, _ = nomad.sent["explore"]
    assert spec.groups[0].share is not None and spec.groups[0].share.milli == 500


def test_training_takes_whole_gpus_only() -> None:
    svc, nomad, ex = started(mig_node(), whole_node(), shared_node())
    (e,) = svc.submit(job("train", "class: training\n"))
    run(svc, ex)
    p = svc.store.get(e.id).placements[0]
    assert p["instance_ids"] == ["GPU-w-0"]
    assert p["choice"] == f"training -> whole GPU {H100} on h100-1: any memory; isolated; tier 1"


def test_the_next_tier_when_the_first_has_nothing_free() -> None:
    svc, nomad, ex = started(mig_node(), whole_node(), shared_node())
    taken = svc.submit(job("fill", "share: {milli: 999}\n"))[0]  # the shared GPU's every slot
    run(svc, ex)
    assert svc.store.get(taken.id).state is EntryState.ADMITTED
    (e,) = svc.submit(job("explore", "class: exploratory\ngpu_memory: 9GiB\n"))
    run(svc, ex)
    p = svc.store.get(e.id).placements[0]
    assert p["instance_ids"] == ["MIG-m-1g"]  # tier 2; the smaller instance, as the score packs
    assert p["choice"] == "exploratory -> MIG 1g.10gb on h100-mig-1: needs 9 GiB; isolated; tier 2"


def test_tiers_follow_the_fleet_as_it_changes() -> None:
    svc, nomad, ex = started(shared_node())
    (e,) = svc.submit(job("serve", "class: serving\ngpu_memory: 14GiB\nallow_unschedulable: true\n"))
    run(svc, ex)
    waiting = svc.store.get(e.id)
    assert waiting.state is EntryState.QUEUED
    assert waiting.reason.startswith("serving: no isolated option with >= 14 GiB in the fleet")
    svc.on_node(mig_node())
    run(svc, ex)
    assert svc.store.get(e.id).placements[0]["instance_ids"] == ["MIG-m-3g"]


def test_a_class_no_tier_can_ever_serve_is_refused_at_submission() -> None:
    import pytest

    from nomad_gpu.domain.errors import Unschedulable

    svc, _, _ = started(shared_node(), mig_node())
    with pytest.raises(Unschedulable) as info:
        svc.submit(job("big", "class: serving\ngpu_memory: 60GiB\n"))
    assert str(info.value).startswith("unschedulable: groups[main]: serving: no isolated option with >= 60 GiB "
                                      "in the fleet; submit with --allow-unschedulable")


def test_an_option_past_the_teams_quota_is_not_offered() -> None:
    from nomad_gpu.domain.fairshare import FairShareConfig, TeamPolicy
    from nomad_gpu.domain.ids import Team

    nomad, ex = RecordingNomad(), ManualExecutor()
    fair = FairShareConfig(teams={Team("t"): TeamPolicy(quota_gpu=0.5)})
    svc = SchedulerService(SqliteStore(), nomad, SchedulingSettings(tick_s=0.01, fair=fair), clock=Clock(),
                           executor=ex)
    svc.on_resync([mig_node(), whole_node()], [])
    (a,) = svc.submit(job("serve-a", "class: serving\ngpu_memory: 14GiB\n"))
    run(svc, ex)
    (b,) = svc.submit(job("serve-b", "class: serving\ngpu_memory: 14GiB\n"))
    run(svc, ex)
    assert svc.store.get(a.id).placements[0]["instance_ids"] == ["MIG-m-3g"]  # 3/7 of a GPU: within 0.5
    waiting = svc.store.get(b.id)  # tier 2's whole GPU (1.0) would break the quota: not offered
    assert waiting.state is EntryState.QUEUED and waiting.placements == ()


def test_a_sweeps_trials_are_hpo_and_take_shares() -> None:
    svc, nomad, ex = started(mig_node(), whole_node(), shared_node())
    trials = svc.submit({"kind": "sweep", "name": "s", "team": "t", "task": {"image": "busybox"},
                         "gpu_memory": "10GiB", "sweep": {"parameters": {"lr": [1, 2]}}})
    run(svc, ex)
    placed = [svc.store.get(t.id).placements[0] for t in trials]
    assert [p["share_milli"] for p in placed] == [250, 250]
    assert all(p["choice"].startswith("hpo -> share 250/1000 of NVIDIA L40S on l40s-1") for p in placed)
