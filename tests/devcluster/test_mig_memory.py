"""The memory a MIG instance reports, as NVML gives it (reference/nvml-mig.md, the `-lgip` sizes)."""

from __future__ import annotations

import pytest

from nomad_gpu.devcluster.config import mig_memory_mib


@pytest.mark.parametrize(
    ("profile", "parent_mib", "mib"),
    [
        # H100 80GB SXM: 9.75 / 19.62 / 19.62 / 39.50 / 39.50 / 79.25 GiB
        pytest.param("1g.10gb", 81920, 9984, id="h100-1g.10gb-9.75gib"),
        pytest.param("1g.20gb", 81920, 20096, id="h100-1g.20gb-19.62gib"),
        pytest.param("2g.20gb", 81920, 20096, id="h100-2g.20gb-19.62gib"),
        pytest.param("3g.40gb", 81920, 40448, id="h100-3g.40gb-39.50gib"),
        pytest.param("4g.40gb", 81920, 40448, id="h100-4g.40gb-39.50gib"),
        pytest.param("7g.80gb", 81920, 81152, id="h100-7g.80gb-79.25gib"),
        # A100 40GB: NVML MB 4864 / 9856 / 9856 / 19968 / 19968 / 40192
        pytest.param("1g.5gb", 40960, 4864, id="a100-40-1g.5gb"),
        pytest.param("1g.10gb", 40960, 9856, id="a100-40-1g.10gb-double-memory"),
        pytest.param("2g.10gb", 40960, 9856, id="a100-40-2g.10gb"),
        pytest.param("3g.20gb", 40960, 19968, id="a100-40-3g.20gb"),
        pytest.param("4g.20gb", 40960, 19968, id="a100-40-4g.20gb"),
        pytest.param("7g.40gb", 40960, 40192, id="a100-40-7g.40gb"),
    ],
)
def test_a_mig_instance_reports_what_nvml_reports(profile: str, parent_mib: int, mib: int) -> None:
    assert mig_memory_mib(profile, parent_mib) == mib
