"""Device groups, health and Reserve from fake NVML nodes, in process (the harness covers the wire)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nomad_gpu.nvml import FakeNvml
from nomad_gpu.nvml.fake import FakeNode
from nomad_gpu.nvml.layouts import a800x8, h100_mig, no_driver
from nomad_gpu.plugin.config import PluginConfig
from nomad_gpu.plugin.devices import SHARED_TYPE, SHARED_VENDOR, Group, Kind, parse_share_id, share_id
from nomad_gpu.plugin.reserve import ReserveError, reserve
from nomad_gpu.plugin.state import NodeState

A800 = a800x8().with_ids()
UUIDS = [g.uuid for g in A800.gpus]


def state_for(node: FakeNode, **config: object) -> tuple[NodeState, FakeNvml]:
    fake = FakeNvml(node)
    state = NodeState(fake)
    state.configure(PluginConfig(**config))  # type: ignore[arg-type]
    return state, fake


def by_key(groups: list[Group]) -> dict[tuple[str, str, str], Group]:
    return {g.key: g for g in groups}


def test_two_shared_gpus_by_four_give_six_whole_and_eight_shares() -> None:
    state, _ = state_for(A800, shared_gpus={UUIDS[0]: 4, "7": 4})
    groups = by_key(state.refresh())
    whole = groups[("nvidia", "gpu", "NVIDIA A800-SXM4-80GB")]
    shared = groups[(SHARED_VENDOR, SHARED_TYPE, "NVIDIA A800-SXM4-80GB")]
    assert [i.id for i in whole.instances] == UUIDS[1:7]
    assert [i.id for i in shared.instances] == [share_id(UUIDS[0], k) for k in range(4)] + [
        share_id(UUIDS[7], k) for k in range(4)]
    assert dict((n, v) for n, v, _ in shared.attributes)["slots"] == 4
    assert all(parse_share_id(i.id) == (i.gpu_uuid, k % 4) for k, i in enumerate(shared.instances))
    assert ("memory", 81920, "MiB") in whole.attributes


def test_mig_devices_are_one_instance_each_grouped_by_profile_and_parent_left_out() -> None:
    node = h100_mig().with_ids()
    state, _ = state_for(node)
    groups = by_key(state.refresh())
    names = {k[2]: [i.id for i in g.instances] for k, g in groups.items()}
    migs = node.gpus[0].migs
    assert names == {
        "NVIDIA H100 80GB HBM3": [node.gpus[1].uuid],
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb": [migs[1].uuid, migs[2].uuid],
        "NVIDIA H100 80GB HBM3 MIG 2g.20gb": [migs[0].uuid],
        "NVIDIA H100 80GB HBM3 MIG 3g.40gb": [migs[3].uuid],
    }
    assert ("memory", 40448, "MiB") in groups[("nvidia", "gpu", "NVIDIA H100 80GB HBM3 MIG 3g.40gb")].attributes


def test_mig_devices_carry_their_parent_gpus_bus_id() -> None:
    """`DetectedDevice.hw_locality.pci_bus_id`: a MIG device's is its parent GPU's, which is how Nomad's node
    API (`Instances[].Locality.PciBusID`) tells the service which instances are slices of one GPU."""
    node = h100_mig().with_ids()
    state, _ = state_for(node)
    parent, whole = node.gpus[0], node.gpus[1]
    bus = {i.id: i.pci_bus_id for g in state.refresh() for i in g.instances}
    assert {bus[m.uuid] for m in parent.migs} == {parent.bus_id} and bus[whole.uuid] == whole.bus_id
    assert parent.bus_id != whole.bus_id


def test_shared_marking_of_a_mig_gpu_is_ignored_for_mig_devices() -> None:
    node = h100_mig().with_ids()
    state, _ = state_for(node, shared_gpus={node.gpus[0].uuid: 4})
    kinds = {i.kind for g in state.refresh() for i in g.instances}
    assert Kind.SHARE not in kinds and Kind.MIG in kinds


def test_next_to_the_stock_plugin_only_shares_are_advertised() -> None:
    state, _ = state_for(A800, shared_gpus={"0": 2}, whole_gpus=False, mig=False)
    (group,) = state.refresh()
    assert group.vendor == SHARED_VENDOR and len(group.instances) == 2


def test_ignored_gpus_are_left_out() -> None:
    state, _ = state_for(A800, ignored_gpu_ids=frozenset(UUIDS[:2]))
    assert len(state.refresh()[0].instances) == 6


def test_xid_marks_the_gpu_unhealthy_for_good_but_application_xids_do_not() -> None:
    state, fake = state_for(A800, shared_gpus={"3": 2})
    state.refresh()
    fake.inject_xid(UUIDS[2], 13)  # an application's own fault
    fake.inject_xid(UUIDS[3], 79)  # fell off the bus
    state.snapshot()  # a Stats read drains the events; the fault must still reach Fingerprint
    groups = state.refresh()
    health = {i.id: (i.healthy, i.health) for g in groups for i in g.instances}
    assert health[UUIDS[2]] == (True, "")
    assert health[share_id(UUIDS[3], 0)] == (False, "XID 79 reported by NVML")
    assert state.refresh() == groups  # sticky


def test_xid_on_a_mig_gpu_instance_marks_only_that_mig_device() -> None:
    node = h100_mig().with_ids()
    state, fake = state_for(node)
    state.refresh()
    fake.inject_xid(node.gpus[0].uuid, 48, gpu_instance_id=2)
    unhealthy = [i.id for g in state.refresh() for i in g.instances if not i.healthy]
    assert unhealthy == [node.gpus[0].migs[3].uuid]


def test_lost_gpu_and_pending_mig_change_are_unhealthy_with_reasons() -> None:
    gpus = list(A800.gpus)
    gpus[4] = replace(gpus[4], lost=True)
    gpus[5] = replace(gpus[5], mig=(False, True))
    state, _ = state_for(replace(A800, gpus=tuple(gpus)))
    health = {i.id: i.health for g in state.refresh() for i in g.instances if not i.healthy}
    assert health == {UUIDS[4]: "GPU fell off the bus (NVML: GPU is lost); needs a reset",
                      UUIDS[5]: "MIG mode change is pending a GPU reset"}


def test_devices_that_vanish_stay_listed_as_unhealthy() -> None:
    state, fake = state_for(A800)
    state.refresh()
    fake.node = replace(fake.node, init_error=9)  # the driver went away under us
    state.close()
    groups = state.refresh()
    assert len(groups[0].instances) == 8 and not any(i.healthy for i in groups[0].instances)
    assert "NVML unavailable" in groups[0].instances[0].health


def test_no_driver_means_no_devices_not_an_error() -> None:
    state, _ = state_for(no_driver())
    assert state.refresh() == []


def test_disabled_plugin_advertises_nothing() -> None:
    state, _ = state_for(A800, enabled=False)
    assert state.refresh() == []


# ---- Reserve --------------------------------------------------------------------------------------
def published(**config: object) -> tuple[dict, PluginConfig]:
    state, _ = state_for(A800, **config)
    return state.published(), state.config


def test_reserve_whole_gpus_maps_to_uuids() -> None:
    instances, cfg = published()
    assert reserve([UUIDS[2], UUIDS[5]], instances, cfg).envs == {"NVIDIA_VISIBLE_DEVICES": f"{UUIDS[2]},{UUIDS[5]}"}


def test_reserve_shares_maps_back_to_the_gpu_once_without_mps() -> None:
    instances, cfg = published(shared_gpus={"0": 4})
    res = reserve([share_id(UUIDS[0], 1), share_id(UUIDS[0], 2)], instances, cfg)
    assert res.envs == {"NVIDIA_VISIBLE_DEVICES": UUIDS[0]} and res.mounts == ()


def test_reserve_shares_with_mps_passes_the_share_limits_and_mounts_the_pipe() -> None:
    instances, cfg = published(shared_gpus={"0": 4}, mps_pipe_directory="/run/nomad-gpu/mps/{uuid}")
    res = reserve([share_id(UUIDS[0], 0), share_id(UUIDS[0], 3)], instances, cfg)
    pipe = f"/run/nomad-gpu/mps/{UUIDS[0]}"
    assert res.envs == {"NVIDIA_VISIBLE_DEVICES": UUIDS[0], "CUDA_MPS_PIPE_DIRECTORY": pipe,
                        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40960M"}
    assert [(m.task_path, m.host_path, m.read_only) for m in res.mounts] == [(pipe, pipe, False)]


def test_reserve_refuses_shares_of_gpus_behind_different_mps_daemons() -> None:
    instances, cfg = published(shared_gpus={"0": 4, "1": 4}, mps_pipe_directory="/run/mps/{index}")
    with pytest.raises(ReserveError, match="separate MPS daemons"):
        reserve([share_id(UUIDS[0], 0), share_id(UUIDS[1], 0)], instances, cfg)


@pytest.mark.parametrize("ids", [
    pytest.param(["GPU-not-here"], id="unknown-gpu"),
    pytest.param([share_id(UUIDS[0], 9)], id="share-beyond-slots"),
    pytest.param([UUIDS[0]], id="whole-id-of-a-shared-gpu"),
    pytest.param([], id="empty"),
])
def test_reserve_refuses_ids_not_advertised(ids: list[str]) -> None:
    instances, cfg = published(shared_gpus={"0": 4})
    with pytest.raises(ReserveError):
        reserve(ids, instances, cfg)
