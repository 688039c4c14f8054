"""MIG profile names, GPU-equivalents (DESIGN 3.3) and request validation."""

from __future__ import annotations

import pytest

from nomad_gpu.domain.errors import InvalidInventory, InvalidRequest
from nomad_gpu.domain.ids import EntryId, Team
from nomad_gpu.domain.requests import AllocAsk, GpuShare, JobRequest, MigSlices, WholeGpus
from nomad_gpu.domain.units import MigProfile, parent_slices_for_model, split_mig_device_name

from .builders import H100


@pytest.mark.parametrize(
    ("name", "slices", "memory_gb", "canonical"),
    [
        pytest.param("3g.40gb", 3, 40, "3g.40gb", id="3g"),
        pytest.param("1g.10gb", 1, 10, "1g.10gb", id="1g"),
        pytest.param("7g.80gb", 7, 80, "7g.80gb", id="7g"),
        pytest.param("1g.10gb+me", 1, 10, "1g.10gb+me", id="media-extension"),
        pytest.param("1g.5gb+gfx", 1, 5, "1g.5gb+gfx", id="graphics"),
        pytest.param("1c.3g.40gb", 1, 40, "1c.3g.40gb", id="compute-instance-on-3g"),
        pytest.param("3G.47GB", 3, 47, "3g.47gb", id="upper-case"),
        pytest.param(" 2g.20gb ", 2, 20, "2g.20gb", id="padded"),
    ],
)
def test_mig_profile_parse(name: str, slices: int, memory_gb: int, canonical: str) -> None:
    p = MigProfile.parse(name)
    assert (p.compute_slices, p.memory_gb, p.name) == (slices, memory_gb, canonical)


@pytest.mark.parametrize("name", ["", "3g", "3g.40", "g.40gb", "MIG 3g.40gb", "3g.40gb.1", "3x.40gb", "three"])
def test_bad_mig_profile_is_invalid_inventory(name: str) -> None:
    with pytest.raises(InvalidInventory, match="not a MIG profile name"):
        MigProfile.parse(name)


@pytest.mark.parametrize(
    ("profile", "model", "expected"),
    [
        pytest.param("1g.10gb", H100, 1 / 7, id="1g-of-7"),
        pytest.param("3g.40gb", H100, 3 / 7, id="3g-of-7"),
        pytest.param("7g.80gb", H100, 1.0, id="full"),
        pytest.param("1g.6gb", "NVIDIA A30", 1 / 4, id="a30-1g-of-4"),
    ],
)
def test_mig_gpu_equivalents(profile: str, model: str, expected: float) -> None:
    p = MigProfile.parse(profile)
    assert p.gpu_equivalents(parent_slices_for_model(model)) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param(f"{H100} MIG 3g.40gb", (H100, "3g.40gb"), id="mig"),
        pytest.param("NVIDIA H100 NVL MIG 3g.47gb", ("NVIDIA H100 NVL", "3g.47gb"), id="nvl"),
        pytest.param(H100, None, id="whole"),
        pytest.param("MIG 3g.40gb", None, id="no-model"),
        pytest.param(f"{H100} MIG ", None, id="no-profile"),
    ],
)
def test_split_mig_device_name(name: str, expected: tuple[str, str] | None) -> None:
    assert split_mig_device_name(name) == expected


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        pytest.param(WholeGpus(2), 2.0, id="whole"),
        pytest.param(MigSlices("3g.40gb", 2), 6 / 7, id="mig"),
        pytest.param(MigSlices("1G.10GB"), 1 / 7, id="mig-canonicalised"),
        pytest.param(GpuShare(250), 0.25, id="share"),
        pytest.param(GpuShare(1000), 1.0, id="full-share"),
    ],
)
def test_gpu_equivalents(gpu: WholeGpus | MigSlices | GpuShare, expected: float) -> None:
    assert gpu.gpu_equivalents == pytest.approx(expected)
    job = JobRequest(EntryId("e"), Team("t"), (AllocAsk("a", 0, 0, 0, gpu), AllocAsk("b", 0, 100, 0, None)))
    assert job.gpu_equivalents == pytest.approx(expected)


def test_mig_request_profile_is_canonical() -> None:
    assert MigSlices(" 3G.40GB ").profile == "3g.40gb"


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: WholeGpus(0), id="zero-gpus"),
        pytest.param(lambda: WholeGpus(1, min_memory_mib=-1), id="negative-memory"),
        pytest.param(lambda: MigSlices("3g.40gb", 0), id="zero-migs"),
        pytest.param(lambda: MigSlices("big"), id="bad-profile"),
        pytest.param(lambda: GpuShare(0), id="share-zero"),
        pytest.param(lambda: GpuShare(1001), id="share-over-a-gpu"),
        pytest.param(lambda: AllocAsk("g", 0, -1, 0, None), id="negative-cpu"),
        pytest.param(lambda: AllocAsk("g", 0, 0, -1, None), id="negative-memory-mb"),
        pytest.param(lambda: JobRequest(EntryId("e"), Team("t"), ()), id="no-groups"),
        pytest.param(lambda: JobRequest(EntryId("e"), Team("t"), (AllocAsk("g"),), priority=0), id="priority-0"),
        pytest.param(lambda: JobRequest(EntryId("e"), Team("t"), (AllocAsk("g"),), priority=101), id="priority-101"),
    ],
)
def test_invalid_requests_raise_invalid_request(build: object) -> None:
    with pytest.raises(InvalidRequest):
        build()  # type: ignore[operator]


def test_bad_mig_request_is_invalid_request_not_inventory() -> None:
    with pytest.raises(InvalidRequest, match="not a MIG profile name") as info:
        MigSlices("3g")
    assert not isinstance(info.value, InvalidInventory)


@pytest.mark.parametrize(
    ("models", "model", "allowed"),
    [
        pytest.param(frozenset(), H100, True, id="any"),
        pytest.param(frozenset({H100}), H100, True, id="listed"),
        pytest.param(frozenset({"NVIDIA A100-SXM4-80GB"}), H100, False, id="not-listed"),
    ],
)
def test_model_restrictions(models: frozenset[str], model: str, allowed: bool) -> None:
    assert WholeGpus(1, models).allows(model) is allowed
    assert MigSlices("1g.10gb", 1, models).allows(model) is allowed
    assert GpuShare(100, models).allows(model) is allowed
