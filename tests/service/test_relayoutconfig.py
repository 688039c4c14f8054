"""`mig_relayout:` in the service config: off by default, checked key by key, one line per mistake."""

from __future__ import annotations

import pytest

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.config.settings import scheduling_from_mapping
from nomad_gpu.service.relayout.config import mig_relayout_from_mapping


def test_off_unless_enabled_and_read_from_the_scheduling_config() -> None:
    assert not scheduling_from_mapping({}).mig_relayout.enabled
    got = scheduling_from_mapping({"mig_relayout": {
        "enabled": True, "namespace": "nomad-gpu-system", "command": "/usr/local/bin/nomad-gpu",
        "nodes": ["h100-mig-1"], "gpus": ["GPU-1"], "cool_down_s": 30, "fingerprint_timeout_s": 90,
        "default_profiles": {"80GB (A100-80GB, H100-80GB)": ["2g.20gb", "1g.10gb"]}}}).mig_relayout
    assert got.enabled and got.nodes == {"h100-mig-1"} and got.gpus == {"GPU-1"}
    assert got.job.namespace == "nomad-gpu-system" and got.job.driver == "raw_exec"
    assert got.controller.cool_down_s == 30 and got.controller.fingerprint_timeout_s == 90
    assert got.controller.job_timeout_s == 300  # left out: the default
    assert got.controller.default_profiles == {"80GB (A100-80GB, H100-80GB)": ("2g.20gb", "1g.10gb")}


@pytest.mark.parametrize(("raw", "fragment"), [
    pytest.param({"enable": True}, "unknown key(s) enable", id="typo"),
    pytest.param({"cool_down_s": -1}, "cool_down_s: must be a number", id="negative"),
    pytest.param({"nodes": "h100"}, "nodes: must be a list", id="nodes-not-list"),
    pytest.param({"driver": ""}, "non-empty strings", id="empty-driver"),
    pytest.param([1], "must be a mapping", id="not-mapping"),
])
def test_mistakes_are_one_line(raw: object, fragment: str) -> None:
    with pytest.raises(InvalidRequest, match=fragment.replace("(", r"\(").replace(")", r"\)")) as info:
        mig_relayout_from_mapping(raw)
    assert "\n" not in str(info.value)
