"""Layers point one way: cli -> service -> (nomad, store, render, sim) -> domain; the API's wire shapes
(`api`) sit under the service, the CLI and the store that builds an entry's, and import only the error tree.

The domain imports no I/O library and reads no clock or environment; the dev cluster imports nothing
of ours (it judges the core, so it must not share code with it). The error tree
(`nomad_gpu.domain.errors`) is dependency-free and open to every layer but the dev cluster, so that
render's errors are the project's too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nomad_gpu"

ALLOWED: dict[str, set[str]] = {
    "domain": {"domain"},
    "api": {"api"},
    "nomad": {"domain", "nomad"},
    "store": {"domain", "store", "api"},
    "render": {"render"},
    "sim": {"domain", "sim"},
    "nvml": {"domain", "nvml"},
    "devcluster": {"devcluster"},
    "service": {"domain", "nomad", "store", "render", "service", "api"},
    "plugin": {"domain", "nvml", "plugin"},
    "cli": {"domain", "nomad", "store", "render", "service", "sim", "devcluster", "nvml", "cli", "api"},
}
SHARED = {"nomad_gpu.domain.errors"}
"""Modules any layer may import (except the dev cluster, which imports nothing of ours)."""
DOMAIN_FORBIDDEN = {"os", "time", "datetime", "socket", "sqlite3", "requests", "nomad", "urllib", "http", "subprocess",
                    "threading", "asyncio", "pathlib", "yaml", "jinja2", "starlette", "uvicorn"}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            out.add("nomad_gpu." + path.relative_to(PACKAGE).parts[0])  # relative: same layer
    return out


def modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layers_point_one_way(layer: str) -> None:
    bad = []
    for path in modules(layer):
        for name in imports(path):
            parts = name.split(".")
            if name in SHARED and layer != "devcluster":
                continue
            if parts[0] == "nomad_gpu" and len(parts) > 1 and parts[1] in ALLOWED and parts[1] not in ALLOWED[layer]:
                bad.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert not bad, "\n".join(bad)


def test_the_error_tree_is_dependency_free() -> None:
    path = PACKAGE / "domain" / "errors.py"
    assert imports(path) <= {"__future__"}, imports(path)


def test_the_domain_does_no_io() -> None:
    bad = [f"{p.relative_to(PACKAGE)} imports {name}" for p in modules("domain") for name in imports(p)
           if name.split(".")[0] in DOMAIN_FORBIDDEN]
    assert not bad, "\n".join(bad)
