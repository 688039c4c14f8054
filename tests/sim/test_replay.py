"""The queueing replay: arrivals, waits and departures through the real cycle."""

from __future__ import annotations

from pathlib import Path

import pytest

from nomad_gpu.sim.replay import ReplayConfig, run_replay
from nomad_gpu.sim.trace import load_trace

from .conftest import write_trace


def test_second_task_waits_for_the_first_to_finish(tmp_path: Path) -> None:
    trace = load_trace(*write_trace(tmp_path, ["n,8000,8192,1,T4"], [
        "a,1000,1024,1,1000,,LS,Running,0,100,0",
        "b,1000,1024,1,1000,,LS,Running,10,60,10",
        "c,1000,1024,1,300,,LS,Pending,20,30,",
    ]))
    r = run_replay(trace, "frag-aware")
    assert r.started == 2 and r.left_out == 1 and r.never_started == 0
    assert sorted(r.waits) == [0.0, 90.0]
    assert r.makespan_s == 150.0
    assert max(r.gpu_util_pct) == 100.0 and r.gpu_util_pct[-1] == 0.0
    assert r.wait_pct(50) == 45.0


def test_a_task_too_big_for_any_node_never_starts(tmp_path: Path) -> None:
    trace = load_trace(*write_trace(tmp_path, ["n,8000,8192,2,T4"], [
        "a,1000,1024,4,1000,,LS,Running,0,100,0",
        "b,1000,1024,1,500,,LS,Running,0,100,0",
    ]))
    r = run_replay(trace, "fgd")
    assert r.started == 1 and r.never_started == 1


def test_speedup_compresses_arrivals_and_sampling_keeps_nodes(tiny: tuple[Path, Path]) -> None:
    trace = load_trace(*tiny)
    slow = run_replay(trace, "best-fit")
    fast = run_replay(trace, "best-fit", ReplayConfig(speedup=10))
    assert fast.started == slow.started == 11
    assert fast.makespan_s < slow.makespan_s
    half = run_replay(trace, "best-fit", ReplayConfig(node_fraction=0.5, seed=1))
    assert half.gpus in (2, 4)
    with pytest.raises(ValueError, match="node fraction"):
        ReplayConfig(node_fraction=0)


def test_multi_gpu_waits_are_reported_apart(tmp_path: Path) -> None:
    trace = load_trace(*write_trace(tmp_path, ["n,8000,8192,2,T4"], [
        "a,1000,1024,1,1000,,LS,Running,0,100,0",
        "b,1000,1024,2,1000,,LS,Running,10,60,10",
    ]))
    r = run_replay(trace, "frag-aware")
    assert sorted(r.waits) == [0.0, 90.0]
    assert r.multi_gpu_waits == [90.0]
    got = r.to_json()["wait_multi_gpu_s"]
    assert got == {"count": 1, "mean": 90.0, "p50": 90.0, "p95": 90.0, "held": 0}


def test_a_starving_multi_gpu_task_is_counted_as_held(tmp_path: Path) -> None:
    # c backfills the GPU that a leaves free, so b starves until nodes are held for it (600 s)
    trace = load_trace(*write_trace(tmp_path, ["n,8000,8192,2,T4"], [
        "a,1000,1024,1,1000,,LS,Running,0,2000,0",
        "b,1000,1024,2,1000,,LS,Running,10,110,10",
        "c,1000,1024,1,1000,,LS,Running,20,3020,20",
    ]))
    r = run_replay(trace, "frag-aware")
    assert r.multi_gpu_waits == [3010.0] and r.multi_gpu_held == 1
