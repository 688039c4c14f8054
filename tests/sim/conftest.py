"""Shared fixtures: the bundled openb trace (loaded once) and tiny hand-written traces."""

from __future__ import annotations

from pathlib import Path

import pytest

from nomad_gpu.sim.trace import NODES_CSV, PODS_CSV, Trace, load_trace

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
              "scheduled_time\n")


@pytest.fixture(scope="session")
def openb_default() -> Trace:
    return load_trace(NODES_CSV, PODS_CSV["default"])


@pytest.fixture(scope="session")
def openb_share() -> Trace:
    return load_trace(NODES_CSV, PODS_CSV["gpushare100"])


def write_trace(tmp: Path, nodes: list[str], pods: list[str]) -> tuple[Path, Path]:
    """CSV files from rows without headers (`name,cpu,mem,gpus,model` and the pod columns)."""
    n, p = tmp / "nodes.csv", tmp / "openb_pod_list_tiny.csv"
    n.write_text(NODE_HEADER + "".join(r + "\n" for r in nodes))
    p.write_text(POD_HEADER + "".join(r + "\n" for r in pods))
    return n, p


@pytest.fixture
def tiny(tmp_path: Path) -> tuple[Path, Path]:
    """Two nodes (one 2-GPU, one 4-GPU) and a dozen tasks of every kind."""
    nodes = ["node-a,32000,131072,2,T4", "node-b,64000,262144,4,V100M16"]
    pods = [
        "pod-00,4000,8192,1,500,,LS,Running,0,100,0",
        "pod-01,4000,8192,1,1000,,LS,Running,10,200,10",
        "pod-02,8000,16384,2,1000,,LS,Running,20,300,20",
        "pod-03,2000,4096,0,0,,LS,Running,30,400,30",
        "pod-04,4000,8192,1,250,T4,LS,Running,40,500,40",
        "pod-05,4000,8192,1,1500,,LS,Running,50,600,50",
        "pod-06,4000,8192,1,300,V100M16|T4,LS,Running,60,700,60",
        "pod-07,4000,8192,1,700,,LS,Pending,70,800,",
        "pod-08,16000,8192,4,1000,,LS,Running,80,900,80",
        "pod-09,4000,8192,1,500,,LS,Running,90,1000,90",
        "pod-10,4000,8192,1,200,,LS,Running,100,1100,100",
        "pod-11,4000,8192,1,800,,LS,Running,110,1200,110",
    ]
    return write_trace(tmp_path, nodes, pods)
