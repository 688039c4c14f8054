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
SHARED = {"nomad_gpu.domain.errors", "nomad_gpu.domain.jobmeta"}
"""Modules any layer may import (except the dev cluster, which imports nothing of ours): the error tree, and the
job meta keys the spec models write and GPU accounting's record reads."""
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


# ---- no import circle between the files of one package ----------------------------------------------
def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path, known: set[str]) -> set[str]:
    """Our modules `path` imports when it runs, wherever the import sits (a function-level import
    still ties the files together); imports only for type checkers (`if TYPE_CHECKING:`) are left out.
    `from package import name` ties to `package.name` when that is a module, else to the package."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit_one(other)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in known:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
        visit(node)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _circles() -> list[list[str]]:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py") if "proto" not in p.parts}
    known = set(paths)
    graph = {name: _runtime_imports(path, known) - {name} for name, path in paths.items()}

    def layer(name: str) -> str:
        return name.split(".")[1] if name.count(".") else name

    # Tarjan's strongly connected components over the edges inside one package
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if layer(w) != layer(v):
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            strong(name)
    return out


def test_no_import_circle_inside_a_package() -> None:
    """Files of one package import each other one way (kopf's import-linter `layers` inside a package):
    a circle means a module is half-initialised when the other reads it, and that order decides."""
    assert not _circles(), "\n".join(" <-> ".join(c) for c in _circles())


# ---- no isinstance over kinds outside domain/kinds/ ----------------------------------------------------
KINDS = PACKAGE / "domain" / "kinds"


def _kind_classes() -> set[str]:
    """Every class the kind modules define (asks, kind objects, the protocols)."""
    return {node.name for path in KINDS.rglob("*.py")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.ClassDef)}


def _kind_checks(path: Path, classes: set[str]) -> list[str]:
    """`isinstance` / `issubclass` calls in ``path`` whose class argument names a kind class (by its own
    name or the name it was imported as)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    local = set(classes)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            local.update(alias.asname for alias in node.names if alias.asname and alias.name in classes)
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in {"isinstance", "issubclass"} and len(node.args) == 2):
            continue
        spec = node.args[1]
        named = spec.elts if isinstance(spec, ast.Tuple) else [spec]
        for n in named:
            name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None
            if name in local:
                out.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.func.id}(..., {name})")
    return out


def test_no_isinstance_over_kinds_outside_the_kind_modules() -> None:
    """Per-kind logic lives behind the kind protocol (`domain/kinds/base.py`): a module elsewhere that
    branches on the ask's class would miss a kind added later."""
    classes = _kind_classes()
    assert {"WholeGpus", "MigSlices", "GpuShare"} <= classes, classes
    bad = [hit for path in sorted(PACKAGE.rglob("*.py")) if KINDS not in path.parents
           for hit in _kind_checks(path, classes)]
    assert not bad, "\n".join(bad)
