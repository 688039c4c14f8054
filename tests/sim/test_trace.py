"""Trace files: the bundled copy, the mapping onto the core's asks, and located errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from nomad_gpu.domain.requests import GpuShare, WholeGpus
from nomad_gpu.sim.trace import Trace, TraceError, load_trace

from .conftest import write_trace


def test_bundled_openb(openb_default: Trace, openb_share: Trace) -> None:
    assert len(openb_default.nodes) == 1213
    assert openb_default.gpu_count == 6212
    assert len(openb_default.pods) == len(openb_share.pods) == 8152
    assert all(g.mode.takes_whole and g.mode.takes_shares for n in openb_default.inventory for g in n.gpus)


def test_tasks_map_onto_asks(tiny: tuple[Path, Path]) -> None:
    trace = load_trace(*tiny)
    by = {p.name: p for p in trace.pods}
    assert by["pod-00"].gpu == GpuShare(500)
    assert by["pod-01"].gpu == WholeGpus(1)
    assert by["pod-02"].gpu == WholeGpus(2) and by["pod-02"].gpu_milli_total == 2000
    assert by["pod-03"].gpu is None and by["pod-03"].gpu_milli_total == 0
    assert by["pod-04"].gpu == GpuShare(250, frozenset({"T4"}))
    assert by["pod-05"].gpu == WholeGpus(1)  # 1500 milli is clipped to a whole GPU
    assert by["pod-06"].spec == "V100M16|T4"
    assert by["pod-07"].runtime_s is None and by["pod-01"].runtime_s == 190
    assert by["pod-01"].to_ask().cpu_mhz == 4000 and by["pod-01"].to_ask().memory_mb == 8192


@pytest.mark.parametrize(
    ("nodes", "pods", "message"),
    [
        pytest.param(["a,1000,1000,x,T4"], ["p,1,1,0,0,,,,0,1,0"], "nodes.csv:2: gpu is not a number", id="bad-number"),
        pytest.param(["a,1000,1000,1,T4"], ["p,-5,1,0,0,,,,0,1,0"], "cpu_milli must be >= 0", id="negative"),
        pytest.param(["a,1000,1000,1,T4", "a,1,1,1,T4"], ["p,1,1,0,0,,,,0,1,0"], "node names repeat", id="dup-node"),
        pytest.param(["a,1000,1000,1,T4"], [], "no tasks", id="empty"),
        pytest.param(["a,1000,1000,1,T4"], ["p,1,1,0,0,,,,zero,1,0"], "creation_time is not a time", id="bad-time"),
    ],
)
def test_bad_files_name_the_file_and_line(tmp_path: Path, nodes: list[str], pods: list[str], message: str) -> None:
    with pytest.raises(TraceError, match=message):
        load_trace(*write_trace(tmp_path, nodes, pods))


def test_missing_file_and_missing_column(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="No such file"):
        load_trace(tmp_path / "nope.csv", tmp_path / "nope2.csv")
    bad = tmp_path / "n.csv"
    bad.write_text("sn,cpu\na,1\n")
    with pytest.raises(TraceError, match="missing column"):
        load_trace(bad, bad)
