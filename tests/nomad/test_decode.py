"""Nomad node and allocation JSON -> core values, on fixtures shaped as reference/nomad-api.md 3-5."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from nomad_gpu.domain.errors import InvalidInventory
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.inventory import Gpu, GpuMode, Inventory, NodeStatus
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.nomad.decode import AllocStatus, ShareRule, SharingConfig, decode_alloc, decode_node

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nomad"
A800 = "NVIDIA A800-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


@pytest.fixture
def a800() -> dict[str, Any]:
    return load("node_a800_8x.json")


@pytest.fixture
def h100() -> dict[str, Any]:
    return load("node_h100_mig_mixed.json")


@pytest.fixture
def shared() -> dict[str, Any]:
    return load("node_shared.json")


# ---- the fixtures are what the reference says they are -------------------------------------------

def test_fixture_attribute_styles() -> None:
    """One node carries unset attribute value keys as null (the server struct), one omits them (docs)."""
    with_nulls = load("node_a800_8x.json")["NodeResources"]["Devices"][0]["Attributes"]["memory"]
    without = load("node_h100_mig_mixed.json")["NodeResources"]["Devices"][0]["Attributes"]["memory"]
    assert with_nulls == {"Float": None, "Int": 81920, "String": None, "Bool": None, "Unit": "MiB"}
    assert without == {"Int": 81559, "Unit": "MiB"}


# ---- capacity ------------------------------------------------------------------------------------

def test_eight_a800s(a800: dict[str, Any]) -> None:
    node = decode_node(a800)
    assert node.id == a800["ID"] and node.name == "gpu-a800-01" and node.datacenter == "dc1"
    assert node.node_pool == "default" and node.node_class == "gpu"
    assert node.status is NodeStatus.READY and node.schedulable
    assert len(node.gpus) == 8 and not node.migs
    assert {g.model for g in node.gpus} == {A800}
    assert {g.memory_mib for g in node.gpus} == {81920}
    assert all(g.healthy and g.mode is GpuMode.WHOLE and g.max_tenants is None for g in node.gpus)
    assert [g.id for g in node.gpus] == [i["ID"] for i in a800["NodeResources"]["Devices"][0]["Instances"]]


def test_reserved_cpu_and_memory_are_subtracted(a800: dict[str, Any]) -> None:
    node = decode_node(a800)
    assert node.cpu_mhz == 128_000 - 2_000
    assert node.memory_mb == 1_031_800 - 4_096


def test_reserved_bigger_than_capacity_leaves_zero(a800: dict[str, Any]) -> None:
    a800["ReservedResources"]["Cpu"]["CpuShares"] = 999_999
    assert decode_node(a800).cpu_mhz == 0


def test_missing_reserved_resources(a800: dict[str, Any]) -> None:
    del a800["ReservedResources"]
    node = decode_node(a800)
    assert (node.cpu_mhz, node.memory_mb) == (128_000, 1_031_800)


def test_mixed_whole_and_mig(h100: dict[str, Any]) -> None:
    node = decode_node(h100)
    assert [g.model for g in node.gpus] == [H100] * 4
    assert [g.healthy for g in node.gpus] == [True, True, True, False]
    by_profile: dict[str, list[Any]] = {}
    for m in node.migs:
        by_profile.setdefault(m.profile.name, []).append(m)
    assert {p: len(ms) for p, ms in by_profile.items()} == {"3g.40gb": 3, "1g.10gb": 4}
    three, one = by_profile["3g.40gb"][0], by_profile["1g.10gb"][0]
    assert (three.model, three.profile.compute_slices, three.profile.memory_gb, three.memory_mib) == (
        H100, 3, 40, 40448)
    assert (one.profile.compute_slices, one.profile.memory_gb, one.memory_mib) == (1, 10, 9984)
    assert three.device_name == f"{H100} MIG 3g.40gb"
    assert three.profile.gpu_equivalents() == pytest.approx(3 / 7)
    assert all(m.id.startswith("MIG-") for m in node.migs)
    assert [m.healthy for m in by_profile["1g.10gb"]] == [True, True, False, True]
    assert node.cpu_mhz == 95_000 and node.memory_mb == 512_952


def test_mig_instances_carry_their_parent_gpus_bus_id(h100: dict[str, Any]) -> None:
    """`Instances[].Locality.PciBusID`: MIG instances of one GPU share their parent's, so they group by it."""
    node = decode_node(h100)
    assert [g.pci_bus_id for g in node.gpus] == [f"00000000:{b}7:00.0" for b in "0123"]
    by_bus: dict[str | None, list[str]] = {}
    for m in node.migs:
        by_bus.setdefault(m.pci_bus_id, []).append(m.profile.name)
    assert by_bus == {"00000000:47:00.0": ["3g.40gb", "3g.40gb"],
                      "00000000:57:00.0": ["3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"]}


@pytest.mark.parametrize("locality", [
    pytest.param(None, id="null"), pytest.param({}, id="empty"), pytest.param({"PciBusID": ""}, id="blank"),
    pytest.param("absent", id="absent"),
])
def test_a_missing_locality_leaves_the_bus_id_unknown(h100: dict[str, Any], locality: Any) -> None:
    for group in h100["NodeResources"]["Devices"]:
        for inst in group["Instances"]:
            if locality == "absent":
                inst.pop("Locality", None)
            else:
                inst["Locality"] = locality
    node = decode_node(h100)
    assert len(node.migs) == 7 and all(m.pci_bus_id is None for m in node.migs)
    assert all(g.pci_bus_id is None for g in node.gpus)


def test_a_shared_gpu_keeps_its_bus_id(shared: dict[str, Any]) -> None:
    by_id: dict[str, Gpu] = {g.id: g for g in decode_node(shared).gpus}
    assert by_id["GPU-cf781d8d-e801-f404-768f-417c36359c13"].pci_bus_id == "00000000:07:00.0"


def test_unhealthy_instances_offer_nothing(h100: dict[str, Any]) -> None:
    nf = NodeFree.of(decode_node(h100), ())
    assert sum(len(ids) for ids in nf.whole_free().values()) == 3
    assert len(nf.mig_free[f"{H100} MIG 1g.10gb"]) == 3
    assert len(nf.mig_free[f"{H100} MIG 3g.40gb"]) == 3
    unhealthy = {i["ID"] for d in h100["NodeResources"]["Devices"] for i in d["Instances"] if not i["Healthy"]}
    offered = {i for ids in nf.whole_free().values() for i in ids} | {i for ids in nf.mig_free.values() for i in ids}
    assert len(unhealthy) == 2 and not unhealthy & offered


def test_shared_gpus(shared: dict[str, Any]) -> None:
    stock = [i["ID"] for i in shared["NodeResources"]["Devices"][0]["Instances"]]
    sharing = SharingConfig((ShareRule(node="gpu-shared-03", gpu_id=stock[1], slots=2),))
    node = decode_node(shared, sharing)
    modes = {g.id: (g.mode, g.max_tenants) for g in node.gpus}
    instances = [i["ID"] for i in shared["NodeResources"]["Devices"][1]["Instances"]]
    plugin = sorted({i.rpartition("-share-")[0] for i in instances})
    assert modes == {stock[0]: (GpuMode.WHOLE, None), stock[1]: (GpuMode.SHARED, 2),
                     plugin[0]: (GpuMode.SHARED, 4), plugin[1]: (GpuMode.SHARED, 4)}
    assert {g.model for g in node.gpus} == {A100}
    nf = NodeFree.of(node, ())
    assert nf.whole_free() == {A100: [stock[0]]}
    assert nf.share_free() == {A100: 1000}


def test_plugin_share_instances_become_one_gpu_each(shared: dict[str, Any]) -> None:
    """The plugin's N share instances `<GPU uuid>-share-<k>` are one shared GPU of N slots, not N GPUs."""
    node = decode_node(shared)
    by_id: dict[str, Gpu] = {g.id: g for g in node.gpus}
    first = by_id["GPU-cf781d8d-e801-f404-768f-417c36359c13"]
    assert first.share_ids == tuple(f"GPU-cf781d8d-e801-f404-768f-417c36359c13-share-{k}" for k in range(4))
    assert (first.max_tenants, first.share_device, first.memory_mib, first.healthy) == (4, A100, 81920, True)
    assert first.instances_for(500) == 2
    assert sum(1 for g in node.gpus if g.share_ids) == 2
    assert all(not g.share_ids for g in node.gpus if g.mode is GpuMode.WHOLE)


def test_one_unhealthy_share_instance_makes_its_gpu_unhealthy(shared: dict[str, Any]) -> None:
    shared["NodeResources"]["Devices"][1]["Instances"][5]["Healthy"] = False
    gpus = {g.id: g for g in decode_node(shared).gpus if g.share_ids}
    assert [g.healthy for g in gpus.values()] == [True, False]


def test_slot_count_groups_name_the_model(shared: dict[str, Any]) -> None:
    """GPUs of one model with different slot counts come in groups named `<model> (<N> slots)`."""
    shared["NodeResources"]["Devices"][1]["Name"] = f"{A100} (4 slots)"
    gpu = next(g for g in decode_node(shared).gpus if g.share_ids)
    assert (gpu.model, gpu.share_device) == (A100, f"{A100} (4 slots)")


def test_a_gpu_advertised_whole_and_shared_is_only_shared(shared: dict[str, Any]) -> None:
    """A stock plugin not told to ignore a shared GPU advertises it too: the core never offers it whole."""
    dup = shared["NodeResources"]["Devices"][0]["Instances"][0]
    dup["ID"] = "GPU-cf781d8d-e801-f404-768f-417c36359c13"
    gpus = [g for g in decode_node(shared).gpus if g.id == dup["ID"]]
    assert len(gpus) == 1 and gpus[0].mode is GpuMode.SHARED and gpus[0].share_ids


def test_a_share_group_with_an_instance_id_without_its_gpu_is_skipped(shared: dict[str, Any],
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    shared["NodeResources"]["Devices"][1]["Instances"][0]["ID"] = "slot-0"
    node = decode_node(shared)
    assert all(g.mode is GpuMode.WHOLE for g in node.gpus), "the unreadable share group is left out, alone"
    assert "share instance ID 'slot-0'" in caplog.text


def test_without_sharing_config_a_stock_gpu_stays_whole(shared: dict[str, Any]) -> None:
    node = decode_node(shared)
    assert sum(g.mode is GpuMode.WHOLE for g in node.gpus) == 2
    assert sum(g.mode is GpuMode.SHARED for g in node.gpus) == 2


@pytest.mark.parametrize(
    ("rule", "shared_stock"),
    [
        pytest.param(ShareRule(model=A100), 2, id="by-model"),
        pytest.param(ShareRule(node="gpu-shared-03"), 2, id="by-node-name"),
        pytest.param(ShareRule(node="some-other-node"), 0, id="other-node"),
        pytest.param(ShareRule(model=H100), 0, id="other-model"),
    ],
)
def test_share_rules_match(shared: dict[str, Any], rule: ShareRule, shared_stock: int) -> None:
    node = decode_node(shared, SharingConfig((rule,)))
    assert sum(g.mode is GpuMode.SHARED for g in node.gpus) == 2 + shared_stock


def test_non_gpu_devices_are_ignored(shared: dict[str, Any]) -> None:
    node = decode_node(shared)
    assert "mlx5_0" not in {g.id for g in node.gpus}


# ---- status ---------------------------------------------------------------------------------------

def test_node_list_with_resources() -> None:
    nodes = {n.name: n for n in (decode_node(raw) for raw in load("nodes_list_resources.json"))}
    assert nodes["gpu-a800-01"].schedulable
    assert nodes["gpu-a800-02"].status is NodeStatus.DOWN
    assert not nodes["gpu-a800-03"].eligible
    assert nodes["gpu-a800-04"].draining
    assert nodes["gpu-a800-05"].status is NodeStatus.INITIALIZING
    assert nodes["gpu-h100-07"].schedulable and len(nodes["gpu-h100-07"].migs) == 7
    assert {n.name for n in nodes.values() if n.schedulable} == {"gpu-a800-01", "gpu-h100-07"}
    assert all(len(n.gpus) == 8 for name, n in nodes.items() if name.startswith("gpu-a800"))
    # a stub and the full node decode to the same thing
    assert nodes["gpu-a800-01"] == decode_node(load("node_a800_8x.json"))


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"Status": "down"}, id="down"),
        pytest.param({"Status": "disconnected"}, id="disconnected"),
        pytest.param({"Status": "initializing"}, id="initializing"),
        pytest.param({"Status": "some-future-state"}, id="unknown-status"),
        pytest.param({"SchedulingEligibility": "ineligible"}, id="ineligible"),
        pytest.param({"Drain": True}, id="drain-flag"),
        pytest.param({"DrainStrategy": {"DrainSpec": {"Deadline": 0}}}, id="drain-strategy"),
    ],
)
def test_unschedulable_nodes_offer_nothing(a800: dict[str, Any], change: dict[str, Any]) -> None:
    a800.update(change)
    node = decode_node(a800)
    assert not node.schedulable
    ledger = Ledger(Inventory.of([node]))
    assert ledger.index.total("whole", A800) == 0
    assert ledger.index.names("whole") == []


# ---- bad data -------------------------------------------------------------------------------------

def _mutate(raw: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    *parents, last = path.split("/")
    target: Any = out
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if value is _DELETE:
        del target[int(last) if isinstance(target, list) else last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return out


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        pytest.param("ID", _DELETE, "without ID", id="no-id"),
        pytest.param("NodeResources/Cpu/CpuShares", "lots", "CpuShares", id="cpu-not-a-number"),
        pytest.param("ReservedResources/Memory/MemoryMB", "x", "MemoryMB", id="reserved-memory-not-a-number"),
        pytest.param("NodeResources/Devices", {"Name": "gpu"}, "Devices", id="devices-not-a-list"),
    ],
)
def test_bad_node_data_is_invalid_inventory(h100: dict[str, Any], path: str, value: Any, message: str) -> None:
    raw = _mutate(h100, path, value)
    with pytest.raises(InvalidInventory, match=message) as info:
        decode_node(raw)
    text = str(info.value)
    assert "\n" not in text and len(text) < 300
    if path != "ID":
        assert h100["ID"] in text, "the message names the node"


@pytest.mark.parametrize(
    ("path", "value", "group"),
    [
        pytest.param("NodeResources/Devices/1/Name", f"{H100} MIG 9q.nothing", 1, id="bad-mig-profile"),
        pytest.param("NodeResources/Devices/0/Instances/0/ID", "MIG-0000", 0, id="mig-id-in-a-whole-group"),
        pytest.param("NodeResources/Devices/0/Instances/0/ID", _DELETE, 0, id="instance-no-id"),
        pytest.param("NodeResources/Devices/0/Attributes/memory", {"Int": "big"}, 0, id="memory-not-a-number"),
    ],
)
def test_a_device_group_we_cannot_read_is_skipped_alone(h100: dict[str, Any], path: str, value: Any,
                                                        group: int) -> None:
    """The real-Nomad issue, section 6: one device group that does not decode is skipped and logged, never
    an aborted resync (the node's other devices still count)."""
    whole = decode_node(h100)
    node = decode_node(_mutate(h100, path, value))
    bad_name = h100["NodeResources"]["Devices"][group]["Name"]
    kept = [g.id for g in whole.gpus if g.model != bad_name] + [m.id for m in whole.migs
                                                                  if m.device_name != bad_name]
    assert sorted([g.id for g in node.gpus] + [m.id for m in node.migs]) == sorted(kept)


def test_node_json_that_is_not_an_object() -> None:
    with pytest.raises(InvalidInventory):
        decode_node([])  # type: ignore[arg-type]


# ---- allocations ----------------------------------------------------------------------------------

def test_full_allocation() -> None:
    raw = load("alloc_full.json")
    a = decode_alloc(raw)
    devices = raw["AllocatedResources"]["Tasks"]["train"]["Devices"][0]
    assert (a.id, a.job_id, a.task_group, a.node_id) == (raw["ID"], "train-llm-000042", "trainer", raw["NodeID"])
    assert a.client_status is AllocStatus.RUNNING and not a.is_terminal
    assert a.desired_status == "run"
    assert a.device_ids == tuple(devices["DeviceIDs"]) and a.device_name == A800
    assert (a.cpu_mhz, a.memory_mb) == (16_000 + 100, 65_536 + 300)
    assert (a.modify_index, a.create_time_ns, a.modify_time_ns) == (131, raw["CreateTime"], raw["ModifyTime"])


def test_allocation_stub_has_no_devices() -> None:
    (raw,) = load("allocs_stub_list.json")
    a = decode_alloc(raw)
    assert a.device_ids == () and a.device_name is None and (a.cpu_mhz, a.memory_mb) == (0, 0)
    assert a.client_status is AllocStatus.COMPLETE and a.is_terminal
    assert a.job_id == "train-llm-000042" and a.modify_index == 177


def test_event_payload_allocation_without_job() -> None:
    raw = load("alloc_full.json")
    assert raw["Job"] is None
    raw["ClientStatus"] = "failed"
    assert decode_alloc(raw).is_terminal


@pytest.mark.parametrize(
    ("status", "expected", "terminal"),
    [
        pytest.param("pending", AllocStatus.PENDING, False, id="pending"),
        pytest.param("running", AllocStatus.RUNNING, False, id="running"),
        pytest.param("complete", AllocStatus.COMPLETE, True, id="complete"),
        pytest.param("failed", AllocStatus.FAILED, True, id="failed"),
        pytest.param("lost", AllocStatus.LOST, True, id="lost"),
        pytest.param("unknown", AllocStatus.UNKNOWN, False, id="unknown-disconnected"),
        pytest.param("brand-new", AllocStatus.UNKNOWN, False, id="future-status"),
        pytest.param(None, AllocStatus.PENDING, False, id="missing"),
    ],
)
def test_client_status(status: str | None, expected: AllocStatus, terminal: bool) -> None:
    raw = load("alloc_full.json")
    raw["ClientStatus"] = status
    a = decode_alloc(raw)
    assert a.client_status is expected and a.is_terminal is terminal


def test_allocation_with_devices_in_several_tasks() -> None:
    raw = load("alloc_full.json")
    raw["AllocatedResources"]["Tasks"]["log-shipper"]["Devices"] = [
        {"Vendor": "nvidia", "Type": "gpu", "Name": A800, "DeviceIDs": ["GPU-extra"]}]
    a = decode_alloc(raw)
    assert a.device_ids[-1] == "GPU-extra" and len(a.device_ids) == 3


def test_an_unhealthy_instance_carries_its_health_description(h100: dict[str, Any]) -> None:
    """`Instances[].HealthDescription` (`NodeDevice`, nomad/structs/structs.go v2.0.5) says why: shown where
    the device is; a healthy one has none, and an unhealthy one without words reads "unhealthy"."""
    devices = h100["NodeResources"]["Devices"]
    sick = [i for d in devices for i in d["Instances"] if not i["Healthy"]]
    sick[0]["HealthDescription"] = "XID 79: GPU has fallen off the bus"
    sick[1]["HealthDescription"] = ""
    node = decode_node(h100)
    health = {str(g.id): g.health for g in node.gpus} | {str(m.id): m.health for m in node.migs}
    assert health[sick[0]["ID"]] == "XID 79: GPU has fallen off the bus"
    assert health[sick[1]["ID"]] == "unhealthy"
    assert {h for iid, h in health.items() if iid not in {s["ID"] for s in sick}} == {""}

