"""Real NVML on a GPU machine, read only (nothing here changes MIG mode or any setting); skipped elsewhere."""

from __future__ import annotations

import pytest

from nomad_gpu.nvml import Inventory, NvmlReader, read_inventory

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def inventory() -> Inventory:
    got = read_inventory()
    if not isinstance(got, Inventory):
        pytest.skip(got.message)
    return got


def test_every_gpu_has_identity_and_memory(inventory: Inventory) -> None:
    for g in inventory.gpus:
        assert g.uuid.startswith("GPU-") and g.name and not g.lost
        assert g.memory_total_mib and g.memory_total_mib > 1024
        assert g.pci_bus_id and g.error is None
    assert inventory.driver_version


def test_utilisation_only_without_mig(inventory: Inventory) -> None:
    for g in inventory.gpus:
        if g.mig_enabled:
            assert g.utilisation_gpu_pct is None
        else:
            assert g.utilisation_gpu_pct is not None and 0 <= g.utilisation_gpu_pct <= 100


def test_mig_devices_where_mig_is_already_enabled(inventory: Inventory) -> None:
    migs = [m for g in inventory.gpus for m in g.migs]
    if not migs:
        pytest.skip("no MIG device on this machine (MIG is never enabled by tests)")
    for m in migs:
        assert m.uuid.startswith("MIG-") and m.profile[0].isdigit() and "g." in m.profile
        assert m.memory_total_mib


def test_two_reads_in_one_session_agree(inventory: Inventory) -> None:
    with NvmlReader() as reader:
        a, b = reader.read(), reader.read()
    assert isinstance(a, Inventory) and isinstance(b, Inventory)
    assert [g.uuid for g in a.gpus] == [g.uuid for g in b.gpus] == [g.uuid for g in inventory.gpus]
