"""Defaults that several layers need, written once.

The service's port appears in the CLI (where it looks for the service), in the service's settings and
in its listen plan; the head-of-line threshold in the core's cycle config and in the service's
settings. Each is a literal here and an import everywhere else, so the layers cannot drift apart.
This module imports nothing, so any layer, the domain included, may use it.
"""

from __future__ import annotations

__all__ = ["DEFAULT_ADDR", "DEFAULT_PORT", "HOL_THRESHOLD_S"]

DEFAULT_PORT = 4690
"""The service's HTTP API port (`NOMAD_GPU_ADDR`, `serve --listen`)."""

DEFAULT_ADDR = f"http://127.0.0.1:{DEFAULT_PORT}"
"""Where the CLI looks for the service, and where `serve` listens, when NOMAD_GPU_ADDR is unset."""

HOL_THRESHOLD_S = 600.0
"""A top-priority job that has waited this long at the head of the queue gets nodes held for it."""
