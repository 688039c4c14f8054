"""The embedding API and `serve_forever`, the entry point `nomad-gpu dev-cluster` calls."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from nomad_gpu import devcluster
from nomad_gpu.devcluster import DevCluster, load_cluster_file

from .conftest import CLUSTERS, ClusterFactory

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def test_cluster_from_path_mapping_or_spec(make_cluster: ClusterFactory) -> None:
    path = CLUSTERS / "seed-a800.yaml"
    from_path = make_cluster(path)
    from_spec = make_cluster(load_cluster_file(path))
    from_mapping = make_cluster({"name": "seed-a800", "nodes": [{"name": "gpu-a800-1"}]})
    assert from_path.node_ids() == from_spec.node_ids() == from_mapping.node_ids()
    assert from_path.url != from_spec.url
    assert requests.get(f"{from_path.url}/v1/status/leader", timeout=5).json()


def test_start_once_and_context_manager() -> None:
    with DevCluster(CLUSTERS / "seed-a800.yaml") as cluster:
        url = cluster.url
        assert requests.get(f"{url}/v1/nodes", timeout=5).status_code == 200
        with pytest.raises(RuntimeError):
            cluster.start()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/v1/nodes", timeout=5)
    with pytest.raises(RuntimeError):
        cluster.start()
    with pytest.raises(ValueError):
        DevCluster(CLUSTERS / "seed-a800.yaml", speed=0)


HANG_GUARD_S = 300.0
"""How long the test waits for the subprocess before calling it hung: a guard against hanging CI, not
a speed assertion (its start and stop take seconds, many more on a loaded 2-core machine)."""


@pytest.mark.server
def test_serve_forever_serves_until_interrupted() -> None:
    code = ("import sys; from nomad_gpu.devcluster import serve_forever; "
            "serve_forever(sys.argv[1], port=0, speed=5.0, on_ready=lambda url: print(url, flush=True))")
    process = subprocess.Popen([sys.executable, "-c", code, str(CLUSTERS / "seed-a800.yaml")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert requests.get(f"{url}/_dev/audit", timeout=HANG_GUARD_S).json()["speed"] == 5.0
        process.send_signal(signal.SIGINT)
        # the exit status is the assertion; how soon it comes depends on the machine's load
        assert process.wait(timeout=HANG_GUARD_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/v1/nodes", timeout=HANG_GUARD_S)


def test_the_dev_cluster_imports_nothing_else_from_the_project() -> None:
    """DESIGN.md 3.8: it judges the core, so it shares no code with it (stdlib and libraries only)."""
    package = Path(devcluster.__file__).parent
    for module in package.glob("*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [] if node.level else [node.module or ""]
            else:
                continue
            assert not [n for n in names if n.split(".")[0] == "nomad_gpu"], f"{module.name} imports {names}"
