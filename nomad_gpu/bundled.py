"""Where the files nomad-gpu ships with live: the default job templates, the bundled dev clusters and
the example job specs.

The top-level ``templates/``, ``clusters/`` and ``jobspecs/`` of the source tree are the one copy people
read and edit. The build maps them into the package as ``nomad_gpu._templates``, ``nomad_gpu._clusters``
and ``nomad_gpu._jobspecs`` (``setup.py``), so the same files are found here through
:mod:`importlib.resources` in a built wheel and in an editable install alike, whatever the working
directory. Nothing else in the code locates them: callers ask this module, and flags (``--templates``,
``--cluster``) point elsewhere.

This module imports nothing of ours, so any layer may use it.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

__all__ = ["bundled_cluster", "bundled_clusters", "clusters_dir", "example", "examples", "jobspecs_dir",
           "resolve_cluster", "templates_dir"]

_TEMPLATES_PACKAGE = "nomad_gpu._templates"
_CLUSTERS_PACKAGE = "nomad_gpu._clusters"
_JOBSPECS_PACKAGE = "nomad_gpu._jobspecs"
_CLUSTER_SUFFIX = ".yaml"


def _package_dir(package: str, source_dir: str) -> Path:
    try:
        root = importlib.resources.files(package)
    except ModuleNotFoundError:
        # run from a source tree without installing it (PYTHONPATH), or an editable install made
        # before the mapping existed: the one copy sits beside the package
        beside = Path(__file__).resolve().parent.parent / source_dir
        if beside.is_dir():
            return beside
        raise RuntimeError(f"{package} is missing: reinstall nomad-gpu (pip install .)") from None
    path = Path(str(root))
    if not isinstance(root, Path) or not path.is_dir():
        # a zipped install has no directory a template loader or a cluster file reader could open
        raise RuntimeError(f"{package} is not a directory on disk ({root}); install nomad-gpu unzipped")
    return path


def templates_dir() -> Path:
    """The default job templates (``<name>.hcl.j2``; ``_*`` are partials)."""
    return _package_dir(_TEMPLATES_PACKAGE, "templates")


def clusters_dir() -> Path:
    """The bundled dev-cluster files (``<name>.yaml``)."""
    return _package_dir(_CLUSTERS_PACKAGE, "clusters")


def jobspecs_dir() -> Path:
    """The example job specs (``<name>.yaml``): what ``nomad-gpu example NAME`` prints."""
    return _package_dir(_JOBSPECS_PACKAGE, "jobspecs")


def examples() -> list[str]:
    """Names of the example specs, e.g. ``train``, sorted."""
    return sorted(p.name.removesuffix(_CLUSTER_SUFFIX) for p in jobspecs_dir().glob(f"*{_CLUSTER_SUFFIX}"))


def example(name: str) -> str:
    """The text of the example spec ``name`` (``train`` or ``train.yaml``); ValueError naming the others."""
    stem = name.removesuffix(_CLUSTER_SUFFIX)
    known = examples()
    if stem not in known:
        raise ValueError(f"no example {name!r} (examples: {', '.join(known) or 'none'})")
    return (jobspecs_dir() / f"{stem}{_CLUSTER_SUFFIX}").read_text(encoding="utf-8")


def bundled_clusters() -> list[str]:
    """Names of the bundled clusters, e.g. ``seed-a800``, sorted."""
    return sorted(p.name.removesuffix(_CLUSTER_SUFFIX) for p in clusters_dir().glob(f"*{_CLUSTER_SUFFIX}"))


def bundled_cluster(name: str) -> Path:
    """The bundled cluster file called ``name`` (``seed-a800`` or ``seed-a800.yaml``); ValueError if none."""
    stem = name.removesuffix(_CLUSTER_SUFFIX)
    known = bundled_clusters()
    if stem not in known:
        raise ValueError(f"no bundled cluster {name!r} (bundled: {', '.join(known) or 'none'})")
    return clusters_dir() / f"{stem}{_CLUSTER_SUFFIX}"


def resolve_cluster(value: str | Path) -> Path:
    """A cluster file: an existing path as given, else a bundled cluster by name (``seed-a800``).

    A path that exists always wins, so a local ``seed-a800`` file is not shadowed by the bundled one.
    Anything else is a ValueError that names what was looked for and what is bundled.
    """
    given = Path(value)
    if given.is_file():
        return given
    if given.exists():
        raise ValueError(f"cluster {str(value)!r} is not a file")
    if given.parent == Path(".") and given.name.removesuffix(_CLUSTER_SUFFIX) in bundled_clusters():
        return bundled_cluster(given.name)
    raise ValueError(f"no cluster file {str(value)!r} and no bundled cluster of that name "
                     f"(bundled: {', '.join(bundled_clusters()) or 'none'})")
