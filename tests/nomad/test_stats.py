"""Allocation stats JSON (`GET /v1/client/allocation/:id/stats`) -> per-device figures."""

from __future__ import annotations

from typing import Any

import pytest

from nomad_gpu.domain.errors import InvalidInventory
from nomad_gpu.nomad.stats import DeviceUsage, decode_alloc_stats


def _gpu(util: int | None, used: int | None, total: int = 81920) -> dict[str, Any]:
    attrs: dict[str, Any] = {"Temperature": {"IntNumeratorVal": 40, "Unit": "C"}}
    if util is not None:
        attrs["GPU utilization"] = {"IntNumeratorVal": util, "Unit": "%", "Desc": "GPU utilization"}
    if used is not None:
        attrs["Memory state"] = {"IntNumeratorVal": used, "IntDenominatorVal": total, "Unit": "MiB"}
    return {"Summary": attrs.get("GPU utilization"), "Stats": {"Nested": None, "Attributes": attrs},
            "Timestamp": "2026-12-01T05:00:00.000000001Z"}


def _usage(groups: list[dict[str, Any]]) -> dict[str, Any]:
    return {"MemoryStats": {"RSS": 1}, "CpuStats": {"Percent": 1.0}, "DeviceStats": groups}


def test_whole_gpus_mig_and_missing_figures() -> None:
    raw = {"ResourceUsage": _usage([
        {"Vendor": "nvidia", "Type": "gpu", "Name": "NVIDIA A100", "InstanceStats": {
            "GPU-b": _gpu(3, 1024), "GPU-a": _gpu(97, 70000)}},
        {"Vendor": "nvidia", "Type": "gpu", "Name": "NVIDIA H100 MIG 1g.10gb", "InstanceStats": {
            "MIG-c": _gpu(None, 200, 9984), "MIG-d": {"Summary": None, "Stats": None, "Timestamp": None}}},
    ]), "Tasks": {}, "Timestamp": 1}
    assert decode_alloc_stats(raw) == (
        DeviceUsage("GPU-a", 97.0, 70000.0, 81920.0), DeviceUsage("GPU-b", 3.0, 1024.0, 81920.0),
        DeviceUsage("MIG-c", None, 200.0, 9984.0), DeviceUsage("MIG-d", None, None, None))


def test_float_values_and_the_tasks_when_the_sum_is_empty() -> None:
    task = {"ResourceUsage": _usage([{"Vendor": "nomad-gpu", "Type": "shared-gpu", "Name": "L40S", "InstanceStats": {
        "GPU-a-share-0": {"Stats": {"Attributes": {"GPU utilization": {"FloatNumeratorVal": 12.5}}}}}}])}
    raw = {"ResourceUsage": {"MemoryStats": {}, "CpuStats": {}, "DeviceStats": []}, "Tasks": {"t": task}}
    assert decode_alloc_stats(raw) == (DeviceUsage("GPU-a-share-0", 12.5),)


def test_an_allocation_that_runs_nothing_has_no_devices() -> None:
    assert decode_alloc_stats({"ResourceUsage": _usage([]), "Tasks": {}, "Timestamp": 0}) == ()
    assert decode_alloc_stats({"ResourceUsage": None, "Tasks": None}) == ()


@pytest.mark.parametrize("raw", [
    [], {"ResourceUsage": {"DeviceStats": {"x": 1}}},
    {"ResourceUsage": _usage([{"InstanceStats": []}])},
    {"ResourceUsage": _usage([{"InstanceStats": {"GPU-a": {"Stats": {"Attributes": []}}}}])},
    {"ResourceUsage": _usage([{"InstanceStats": {"GPU-a": {"Stats": {"Attributes": {
        "GPU utilization": {"IntNumeratorVal": "lots"}}}}}}])},
])
def test_unreadable_stats_are_refused_with_a_reason(raw: Any) -> None:
    with pytest.raises(InvalidInventory):
        decode_alloc_stats(raw)
