"""What a wheel needs that a checkout hides: declared imports, bundled files, clusters by name.

The full proof builds the wheel and runs it from an empty directory (.ci/wheel-check, minutes, run
by CI); these are the cheap checks that fail in the test run first.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.metadata
import importlib.resources
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nomad_gpu import bundled
from nomad_gpu.cli.main import main

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "nomad_gpu"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _dist_name(requirement: str) -> str:
    name = re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _third_party_imports() -> dict[str, set[tuple[str, bool]]]:
    """Top-level name -> {(module, imported at module level)} for every non-stdlib import in the package."""
    found: dict[str, set[tuple[str, bool]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top_level = {id(n) for n in tree.body} | {id(n) for s in tree.body if isinstance(s, ast.If) for n in s.body}
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                root = name.split(".")[0]
                if root != "nomad_gpu" and root not in sys.stdlib_module_names:
                    found.setdefault(root, set()).add((str(path.relative_to(REPO)), id(node) in top_level))
    return found


def test_every_import_is_a_declared_dependency() -> None:
    """A wheel installed without extras must import: numpy came only through the plot extra once."""
    required = {_dist_name(r) for r in PYPROJECT["project"]["dependencies"]}
    optional = {_dist_name(r) for reqs in PYPROJECT["project"]["optional-dependencies"].values() for r in reqs}
    by_module = importlib.metadata.packages_distributions()
    bad = []
    for module, places in sorted(_third_party_imports().items()):
        dists = {_dist_name(d) for d in by_module.get(module, [])}
        if dists & required:
            continue
        eager = sorted(path for path, at_top in places if at_top)
        if dists & optional and not eager:
            continue  # an extra, imported only where it is used
        bad.append(f"{module} (distribution {', '.join(sorted(dists)) or 'unknown'}) in {sorted(p for p, _ in places)}")
    assert not bad, "imports not declared in [project] dependencies:\n" + "\n".join(bad)


def test_the_bundled_directories_are_the_top_level_ones() -> None:
    """One copy: the package reads the very templates/ and clusters/ people edit (editable install)."""
    assert bundled.templates_dir().resolve() == (REPO / "templates").resolve()
    assert bundled.clusters_dir().resolve() == (REPO / "clusters").resolve()


@pytest.mark.parametrize(("package", "directory"), [("nomad_gpu._templates", "templates"),
                                                    ("nomad_gpu._clusters", "clusters"),
                                                    ("nomad_gpu._jobspecs", "jobspecs")])
def test_every_bundled_file_is_package_data(package: str, directory: str) -> None:
    """A file the package-data globs miss would be in a checkout but not in the wheel."""
    globs = PYPROJECT["tool"]["setuptools"]["package-data"][package]
    missing = [p.name for p in sorted((REPO / directory).iterdir())
               if p.is_file() and p.suffix != ".py" and not any(fnmatch.fnmatch(p.name, g) for g in globs)]
    assert not missing, f"{directory}/ files not shipped in the wheel (extend package-data): {missing}"


def test_clusters_resolve_by_name_or_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert bundled.bundled_clusters() == ["mig-h100", "mixed-fleet", "nvlink-fleet", "seed-a800"]
    assert bundled.resolve_cluster("seed-a800") == bundled.clusters_dir() / "seed-a800.yaml"
    assert bundled.resolve_cluster("seed-a800.yaml") == bundled.clusters_dir() / "seed-a800.yaml"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "seed-a800").write_text("nodes: []\n")
    assert bundled.resolve_cluster("seed-a800") == Path("seed-a800")  # a file that exists wins over a name
    with pytest.raises(ValueError, match="bundled: mig-h100, mixed-fleet, nvlink-fleet, seed-a800"):
        bundled.resolve_cluster("sub/mixed-fleet")  # a path, not a name: never the bundled one
    with pytest.raises(ValueError, match="not a file"):
        bundled.resolve_cluster(str(tmp_path))
    with pytest.raises(ValueError, match="no bundled cluster 'h999'"):
        bundled.bundled_cluster("h999")


def test_dev_cluster_names_the_bundled_clusters_on_a_bad_name() -> None:
    result = CliRunner().invoke(main, ["dev-cluster", "--cluster", "a800"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: no cluster file 'a800' and no bundled cluster of that name "
        "(bundled: mig-h100, mixed-fleet, nvlink-fleet, seed-a800)"]


def test_a_source_tree_on_the_path_finds_the_one_copy_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the mapped packages (PYTHONPATH=. or an editable install made before the mapping)."""
    real = importlib.resources.files

    def files(package: str) -> Any:
        if package in ("nomad_gpu._templates", "nomad_gpu._clusters", "nomad_gpu._jobspecs"):
            raise ModuleNotFoundError(package)
        return real(package)

    monkeypatch.setattr(importlib.resources, "files", files)  # the module bundled reads it from
    assert bundled.templates_dir() == REPO / "templates"
    assert bundled.resolve_cluster("mig-h100") == REPO / "clusters" / "mig-h100.yaml"
    assert bundled.jobspecs_dir() == REPO / "jobspecs"


def test_the_license_is_an_spdx_expression_for_a_setuptools_that_reads_it() -> None:
    """A `license = {text = ...}` table is deprecated (setuptools warns builds stop in 2027); the SPDX string
    needs setuptools 77 or later (PEP 639)."""
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    (setuptools,) = [r for r in PYPROJECT["build-system"]["requires"] if _dist_name(r) == "setuptools"]
    assert re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", setuptools) and int(setuptools.split(">=")[1].split(".")[0]) >= 77
