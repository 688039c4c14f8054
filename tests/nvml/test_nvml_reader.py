"""The NVML reader against fake nodes: what it reports, what it leaves absent, and that it never crashes."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from nomad_gpu.nvml import FakeNvml, Inventory, NvmlReader, NvmlUnavailable, Unavailable, load_layout, read_inventory
from nomad_gpu.nvml.fake import FakeNode, NVMLError
from nomad_gpu.nvml.layouts import a800x8, h100_mig, h200


def read(node: FakeNode) -> Inventory:
    inv = read_inventory(FakeNvml(node))
    assert isinstance(inv, Inventory), inv
    return inv


def test_a800_node_whole_gpus_with_utilisation_processes_and_nvswitch() -> None:
    inv = read(a800x8())
    assert [g.name for g in inv.gpus] == ["NVIDIA A800-SXM4-80GB"] * 8
    assert len({g.uuid for g in inv.gpus}) == 8 and all(g.uuid.startswith("GPU-") for g in inv.gpus)
    busy = inv.gpus[0]
    assert (busy.memory_total_mib, busy.memory_used_mib, busy.utilisation_gpu_pct) == (81920, 70116, 97)
    assert busy.pci_bus_id == "00000000:07:00.0"
    assert [(p.pid, p.used_memory_mib, p.gpu_instance_id) for p in busy.processes] == [(4242, 70112, None)]
    assert inv.gpus[1].utilisation_gpu_pct == 0  # idle is a real zero, not absent
    assert all(g.mig_mode is not None and not g.mig_mode.current for g in inv.gpus)
    assert inv.nvswitch and len(inv.links) == 28 and all(link.nvlinks == 0 for link in inv.links)
    levels: dict[tuple[str, ...], str | None] = {(link.gpu_a, link.gpu_b): link.pcie for link in inv.links}
    g = [x.uuid for x in inv.gpus]
    assert levels[tuple(sorted((g[0], g[1])))] == "switch"
    assert levels[tuple(sorted((g[0], g[2])))] == "node"
    assert levels[tuple(sorted((g[0], g[7])))] == "system"
    assert inv.driver_version == "535.161.08"


def test_h100_mixed_mig_layout_profiles_placements_and_no_utilisation() -> None:
    inv = read(h100_mig())
    mig_gpu, whole = inv.gpus
    assert mig_gpu.mig_enabled and not whole.mig_enabled
    assert [(m.profile, m.placement_start, m.placement_size, m.memory_total_mib) for m in mig_gpu.migs] == [
        ("2g.20gb", 0, 2, 20096), ("1g.10gb", 2, 1, 9984), ("1g.10gb", 3, 1, 9984), ("3g.40gb", 4, 4, 40448)]
    assert all(m.uuid.startswith("MIG-") and m.name == f"NVIDIA H100 80GB HBM3 MIG {m.profile}" for m in mig_gpu.migs)
    # NVML gives no utilisation on a MIG-enabled GPU: absent, never zero.
    assert mig_gpu.utilisation_gpu_pct is None and mig_gpu.utilisation_memory_pct is None
    assert mig_gpu.error is None  # "not supported" is an absent figure, not a failure
    assert [(p.pid, p.used_memory_mib, p.gpu_instance_id) for p in mig_gpu.processes] == [(5100, None, 12),
                                                                                         (5200, None, 2)]
    assert whole.utilisation_gpu_pct == 3
    (link,) = inv.links
    assert link.nvlinks == 4 and not inv.nvswitch


def test_h200_single_gpu() -> None:
    inv = read(h200())
    (gpu,) = inv.gpus
    assert (gpu.name, gpu.memory_total_mib, gpu.utilisation_gpu_pct) == ("NVIDIA H200", 143771, 0)
    assert inv.links == () and not inv.nvswitch


def test_gpu_without_mig_support_reports_no_mode() -> None:
    node = h200()
    inv = read(replace(node, gpus=(replace(node.gpus[0], mig=None),)))
    assert inv.gpus[0].mig_mode is None and inv.gpus[0].error is None


def test_pending_mig_mode_is_reported_as_changing() -> None:
    node = h200()
    inv = read(replace(node, gpus=(replace(node.gpus[0], mig=(False, True)),)))
    mode = inv.gpus[0].mig_mode
    assert mode is not None and mode.changing and not mode.current and mode.pending


def test_lost_gpu_is_marked_and_the_others_still_read() -> None:
    node = a800x8()
    gpus = list(node.gpus)
    gpus[3] = replace(gpus[3], lost=True)
    inv = read(replace(node, gpus=tuple(gpus)))
    assert [g.lost for g in inv.gpus] == [False, False, False, True, False, False, False, False]
    lost = inv.gpus[3]
    assert lost.uuid.startswith("GPU-") and lost.memory_total_mib is None and lost.utilisation_gpu_pct is None
    assert len(inv.links) == 21  # the lost GPU is left out of the topology


@pytest.mark.parametrize(("code", "reason", "fragment"), [
    pytest.param(12, Unavailable.NO_LIBRARY, "no NVIDIA driver on this node", id="no-library"),
    pytest.param(9, Unavailable.NO_DRIVER, "kernel driver is not loaded", id="driver-not-loaded"),
    pytest.param(18, Unavailable.VERSION_MISMATCH, "version mismatch", id="mismatch"),
    pytest.param(4, Unavailable.NO_PERMISSION, "permission", id="no-permission"),
    pytest.param(999, Unavailable.ERROR, "NVML failed to start", id="unknown"),
])
def test_start_failures_are_typed_results(code: int, reason: Unavailable, fragment: str) -> None:
    got = read_inventory(FakeNvml(FakeNode(gpus=(), init_error=code)))
    assert isinstance(got, NvmlUnavailable) and got.reason is reason and fragment in got.message
    assert got.to_json()["available"] is False


def test_driver_without_gpus_is_no_gpu() -> None:
    got = read_inventory(FakeNvml(FakeNode(gpus=())))
    assert isinstance(got, NvmlUnavailable) and got.reason is Unavailable.NO_GPU


def test_real_pynvml_without_a_driver_is_a_typed_result() -> None:
    got = read_inventory()  # the real nvidia-ml-py; on a GPU machine it simply reads
    if isinstance(got, NvmlUnavailable):
        assert got.reason in (Unavailable.NO_LIBRARY, Unavailable.NO_DRIVER, Unavailable.NO_GPU)
    else:
        assert got.gpus


def test_xids_arrive_after_registration_and_between_reads() -> None:
    node = a800x8()
    gpus = list(node.gpus)
    gpus[5] = replace(gpus[5], xids=(79,))
    fake = FakeNvml(replace(node, gpus=tuple(gpus)))
    reader = NvmlReader(fake)
    first = reader.read()
    assert isinstance(first, Inventory)
    assert [(x.gpu_uuid, x.code) for x in first.xid_errors] == [(first.gpus[5].uuid, 79)]
    fake.inject_xid(first.gpus[2].uuid, 48, gpu_instance_id=None)
    second = reader.read()
    assert isinstance(second, Inventory) and [x.code for x in second.xid_errors] == [48]
    third = reader.read()
    assert isinstance(third, Inventory) and third.xid_errors == ()
    reader.close()
    assert fake.initialised == 0


class Recorder:
    """Wraps an NVML module and records every function the reader touches."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.names: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        self.names.add(name)
        return getattr(self.inner, name)


@pytest.mark.parametrize("layout", ["a800x8", "h100-mig", "h200"])
def test_reader_is_read_only(layout: str) -> None:
    rec = Recorder(FakeNvml(load_layout(layout)))
    with NvmlReader(rec) as reader:
        assert isinstance(reader.read(), Inventory)
    writes = {n for n in rec.names if re.search(r"Set(?!Wait|Create|Free)|Create(Gpu|Compute)|Destroy|Reset|Clear", n)}
    assert not writes and rec.names


def test_unexpected_exception_types_are_not_swallowed() -> None:
    class Broken(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise RuntimeError("a bug in our code, not an NVML state")

    with pytest.raises(RuntimeError):
        read_inventory(Broken(h200()))


def test_one_failing_call_marks_the_gpu_with_the_error() -> None:
    class Flaky(FakeNvml):
        def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
            raise NVMLError(999)

    inv = read_inventory(Flaky(h200()))
    assert isinstance(inv, Inventory)
    assert inv.gpus[0].memory_total_mib is None and "nvmlDeviceGetMemoryInfo" in (inv.gpus[0].error or "")
