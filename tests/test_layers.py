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


def module_name(path: Path) -> str:
    """`nomad_gpu/devcluster/gc.py` -> `nomad_gpu.devcluster.gc`; a package's `__init__.py` is the package."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names: `from ..service import metrics` in
    `nomad_gpu.domain.fairshare` is `nomad_gpu.service` (Python's own rule: a module's package is its
    name less the last part, a package's is itself; each dot past the first climbs one package)."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join(base + ([node.module] if node.module else []))


def source_imports(source: str, module: str, is_package: bool = False, *, skip_type_checking: bool = False,
                   known: set[str] | None = None) -> set[str]:
    """Every module `source` (the text of `module`) imports, wherever the import sits: at the top, in a
    function or a class body (an import inside a function is still a dependency); relative imports are
    resolved to the module they name. `from package import name` yields `package.name` when that is one
    of the `known` modules, else `package`. With `skip_type_checking`, imports under `if TYPE_CHECKING:`
    are left out (they never run)."""
    known = known or set()
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if skip_type_checking and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit_one(other)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = resolve(module, is_package, node)
            out.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
        visit(node)

    visit(ast.parse(source))
    return out


def imports(path: Path) -> set[str]:
    return source_imports(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")


def layer_violations(layer: str, imported: dict[str, set[str]]) -> list[str]:
    """`module imports name` for each import (`imported`: module -> the modules it imports) that a module
    of `layer` may not make."""
    bad = []
    for module, names in sorted(imported.items()):
        for name in sorted(names):
            parts = name.split(".")
            if name in SHARED and layer != "devcluster":
                continue
            if parts[0] == "nomad_gpu" and len(parts) > 1 and parts[1] in ALLOWED and parts[1] not in ALLOWED[layer]:
                bad.append(f"{module} imports {name}")
    return bad


def modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layers_point_one_way(layer: str) -> None:
    bad = layer_violations(layer, {module_name(path): imports(path) for path in modules(layer)})
    assert not bad, "\n".join(bad)


def test_the_error_tree_is_dependency_free() -> None:
    path = PACKAGE / "domain" / "errors.py"
    assert imports(path) <= {"__future__"}, imports(path)


def test_the_domain_does_no_io() -> None:
    bad = [f"{p.relative_to(PACKAGE)} imports {name}" for p in modules("domain") for name in imports(p)
           if name.split(".")[0] in DOMAIN_FORBIDDEN]
    assert not bad, "\n".join(bad)


# ---- no import circle, inside a package or across packages -------------------------------------------
def import_graph() -> dict[str, set[str]]:
    """Our modules -> our modules each imports when it runs, relative and function-level imports
    included; imports only for type checkers (`if TYPE_CHECKING:`) are left out."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py") if "proto" not in p.parts}
    known = set(paths)
    graph = {}
    for name, path in paths.items():
        found = source_imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py",
                               skip_type_checking=True, known=known)
        graph[name] = {other for other in found if other in known} - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph`, within a layer or across layers: Tarjan's strongly connected
    components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, set())):
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


def test_no_import_circle_anywhere() -> None:
    """Modules import each other one way, inside a package and across packages (kopf's import-linter
    `layers`): a circle means a module is half-initialised when the other reads it, and that order decides."""
    found = circles(import_graph())
    assert not found, "\n".join(" <-> ".join(c) for c in found)


# ---- the service's groups point one way ------------------------------------------------------------------
SERVICE = PACKAGE / "service"
SERVICE_GROUPS = ("ui", "accounting", "asks", "life", "relayout", "config", "admission", "loops", "http", "ha")
"""The subpackages of `nomad_gpu/service/`, lowest first: a module of a group imports its own group and
the groups before it, never one after it (imports for type checkers included: a type names a dependency
too). Each group's `__init__.py` says what it is and what it may import."""
SERVICE_WIRING = {"__init__", "app", "demo", "backup", "loglimit"}
"""The modules at the top of `service/`: the process's wiring and the CLI's entry points into the service.
They may import every group; no group imports them."""


def service_group(module: str) -> str | None:
    """`nomad_gpu.service.loops.scheduler` -> `loops`; a module at the top of `service/` is its own name
    (`app`); None outside the service (and for the `nomad_gpu.service` package itself)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["nomad_gpu", "service"] and len(parts) > 2 else None


def group_violations(imported: dict[str, set[str]]) -> list[str]:
    """`module imports name` for each import of a group's module (`imported`: module -> the modules it
    imports) that reaches a later group or the wiring at the top of `service/`."""
    bad = []
    for module, names in sorted(imported.items()):
        own = service_group(module)
        if own not in SERVICE_GROUPS:
            continue
        for name in sorted(names):
            other = service_group(name)
            if other is None or other == own:
                continue
            if other not in SERVICE_GROUPS or SERVICE_GROUPS.index(other) > SERVICE_GROUPS.index(own):
                bad.append(f"{module} imports {name}")
    return bad


def service_imports() -> dict[str, set[str]]:
    """Each module of the service -> the modules it imports, type-only imports included."""
    known = {module_name(p) for p in PACKAGE.rglob("*.py")}
    return {module_name(p): source_imports(p.read_text(encoding="utf-8"), module_name(p), p.name == "__init__.py",
                                           known=known) for p in sorted(SERVICE.rglob("*.py"))}


def test_the_service_groups_point_one_way() -> None:
    bad = group_violations(service_imports())
    assert not bad, "\n".join(bad)


def test_every_service_module_is_in_a_group_or_wires_the_process() -> None:
    """A new subpackage takes its place in SERVICE_GROUPS, and a new module joins a group rather than the top."""
    folders = {p.name for p in SERVICE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(SERVICE_GROUPS), folders ^ set(SERVICE_GROUPS)
    assert {p.stem for p in SERVICE.glob("*.py")} == SERVICE_WIRING
    for group in SERVICE_GROUPS:
        init = SERVICE / group / "__init__.py"
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), f"{init} says what the group is"


@pytest.mark.parametrize(("module", "source", "expected"), [
    pytest.param("nomad_gpu.service.loops.scheduler", "from ..http.views import inventory_view",
                 ["nomad_gpu.service.loops.scheduler imports nomad_gpu.service.http.views"], id="back-import"),
    pytest.param("nomad_gpu.service.life.tracking",
                 "if TYPE_CHECKING:\n    from nomad_gpu.service.loops import scheduler\n",
                 ["nomad_gpu.service.life.tracking imports nomad_gpu.service.loops.scheduler"], id="type-only"),
    pytest.param("nomad_gpu.service.http.api", "def f():\n    from ..app import run\n",
                 ["nomad_gpu.service.http.api imports nomad_gpu.service.app"], id="a-group-importing-the-wiring"),
    pytest.param("nomad_gpu.service.loops.scheduler", "from ..life.tracking import Tracked\nfrom . import throttle\n",
                 [], id="down-and-within"),
    pytest.param("nomad_gpu.service.app", "from .ha import standby\nfrom .http import api\n", [], id="the-wiring"),
])
def test_a_planted_import_against_the_groups_order_is_caught(module: str, source: str, expected: list[str]) -> None:
    known = {"nomad_gpu.service.http.views", "nomad_gpu.service.loops.scheduler", "nomad_gpu.service.loops.throttle",
             "nomad_gpu.service.life.tracking", "nomad_gpu.service.app", "nomad_gpu.service.ha.standby",
             "nomad_gpu.service.http.api"}
    assert group_violations({module: source_imports(source, module, known=known)}) == expected


def test_a_planted_circle_across_layers_is_caught() -> None:
    graph = {"nomad_gpu.service.x": {"nomad_gpu.store.y"}, "nomad_gpu.store.y": {"nomad_gpu.service.x"}}
    assert circles(graph) == [["nomad_gpu.service.x", "nomad_gpu.store.y"]]


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


# ---- the guards above catch what they guard (planted violations) --------------------------------------
@pytest.mark.parametrize(("module", "is_package", "source", "expected"), [
    pytest.param("nomad_gpu.domain.fairshare", False, "from ..service import metrics", "nomad_gpu.service",
                 id="two-dots-climb-one-package"),
    pytest.param("nomad_gpu.devcluster.gc", False, "from .jobs import JSON", "nomad_gpu.devcluster.jobs",
                 id="one-dot-is-the-own-package"),
    pytest.param("nomad_gpu.devcluster", True, "from .config import parse_cluster", "nomad_gpu.devcluster.config",
                 id="a-package-init-is-its-own-package"),
    pytest.param("nomad_gpu.service.http.routes", False, "from ...domain import fit", "nomad_gpu.domain",
                 id="three-dots-from-a-subpackage"),
    pytest.param("nomad_gpu.store.sqlite", False, "from nomad_gpu.api import payloads", "nomad_gpu.api",
                 id="absolute"),
])
def test_relative_imports_resolve_to_the_module_they_name(module: str, is_package: bool, source: str,
                                                          expected: str) -> None:
    assert source_imports(source, module, is_package) == {expected}


def test_a_planted_relative_import_across_layers_is_caught() -> None:
    """The hole this test once had: `from ..service import metrics` in the domain passed as "relative,
    so the same layer"."""
    planted = "def f():\n    from ..service import metrics\n    return metrics\n"
    imported = {"nomad_gpu.domain.fairshare": source_imports(planted, "nomad_gpu.domain.fairshare")}
    assert layer_violations("domain", imported) == ["nomad_gpu.domain.fairshare imports nomad_gpu.service"]
    assert layer_violations("service", {"nomad_gpu.service.x": source_imports(
        "from ..domain import fit", "nomad_gpu.service.x")}) == []


def test_a_planted_circle_through_a_function_level_relative_import_is_caught() -> None:
    """`state` imports `gc` at the top and `gc` imports `state` inside a function: still a circle (the
    import order decides which one is half-initialised); a type checker's import is not."""
    known = {"nomad_gpu.dc", "nomad_gpu.dc.state", "nomad_gpu.dc.gc", "nomad_gpu.dc.jobs"}
    sources = {
        "nomad_gpu.dc.state": "from . import gc\nfrom .jobs import JSON\n",
        "nomad_gpu.dc.gc": "def collect():\n    from .state import ClusterState\n    return ClusterState\n",
        "nomad_gpu.dc.jobs": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .state import X\n",
    }
    graph = {name: source_imports(text, name, skip_type_checking=True, known=known) & known
             for name, text in sources.items()}
    assert graph["nomad_gpu.dc.state"] == {"nomad_gpu.dc.gc", "nomad_gpu.dc.jobs"}
    assert circles(graph) == [["nomad_gpu.dc.gc", "nomad_gpu.dc.state"]]
    graph["nomad_gpu.dc.gc"] = set()
    assert circles(graph) == []
