"""Defaults that several layers need, written once.

The service's port appears in the CLI (where it looks for the service), in the service's settings and
in its listen plan; the head-of-line threshold in the core's cycle config and in the service's
settings. Each is a literal here and an import everywhere else, so the layers cannot drift apart.
This module imports nothing, so any layer, the domain included, may use it.
"""

from __future__ import annotations

__all__ = ["CLASS_RUNTIMES_S", "DEFAULT_ADDR", "DEFAULT_PORT", "HOL_THRESHOLD_S", "TEMPLATE_RUNTIMES_S"]

DEFAULT_PORT = 4690
"""The service's HTTP API port (`NOMAD_GPU_ADDR`, `serve --listen`)."""

DEFAULT_ADDR = f"http://127.0.0.1:{DEFAULT_PORT}"
"""Where the CLI looks for the service, and where `serve` listens, when NOMAD_GPU_ADDR is unset."""

HOL_THRESHOLD_S = 600.0
"""A top-priority job that has waited this long at the head of the queue gets nodes held for it."""

CLASS_RUNTIMES_S: dict[str, float | None] = {"training": 2 * 3600.0, "hpo": 1800.0, "exploratory": 3600.0,
                                             "interactive": 4 * 3600.0, "serving": None}
"""The run time an ETA assumes for a job of a workload class whose spec gives no `runtime:` (the operator's
`runtime_defaults.classes`); None: it runs until stopped, so what waits behind it has no ETA."""

TEMPLATE_RUNTIMES_S: dict[str, float | None] = {"batch": 3600.0, "service": None}
"""The same for a job of no class, by its template (`runtime_defaults.templates`), as Slurm's partition
DefaultTime stands in for a job's missing time limit."""
