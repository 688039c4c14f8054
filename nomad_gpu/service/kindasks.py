"""The service side of each GPU kind: the core's ask a spec group's kind field becomes.

The spec's kind fields are render's (`render/speckinds.py`: ``gpu:``, ``mig:``, ``share:``, and any
registered), the asks are the core's (`domain/kinds`); the render layer may not import the core, so the
step between them is registered here, by the core's kind name. A new kind adds its builder with
`register_ask`; `service/translate.py` names no kind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.requests import GpuAsk, GpuShare, MigSlices, WholeGpus

__all__ = ["AskBuilder", "ask_for", "register_ask", "unregister_ask"]

AskBuilder = Callable[[Any, int | None], GpuAsk]
"""(the kind field's validated value, the group's `gpu_memory` in bytes or None) -> the core's ask."""

_BUILDERS: dict[str, AskBuilder] = {}


def register_ask(kind: str, build: AskBuilder) -> None:
    """Add the ask builder of the core's kind ``kind`` (a second builder for a kind replaces none: a bug)."""
    found = _BUILDERS.get(kind)
    if found is not None and found is not build:
        raise ValueError(f"an ask builder for kind {kind!r} is already registered")
    _BUILDERS[kind] = build


def unregister_ask(kind: str) -> None:
    _BUILDERS.pop(kind, None)


def ask_for(kind: str, value: Any, need: int | None) -> GpuAsk:
    """The core's ask for a kind field's ``value``; InvalidRequest when the kind has no builder here."""
    build = _BUILDERS.get(kind)
    if build is None:
        raise InvalidRequest(f"no GPU kind {kind!r} in this service")
    return build(value, need)


def _whole(gpu: Any, need: int | None) -> GpuAsk:
    # `gpu_memory` beside `gpu:`: whole GPUs whose memory holds it
    floor = gpu.min_memory_mib or (-(-need // (1 << 20)) if need is not None else 0)
    return WholeGpus(gpu.count, frozenset(gpu.models or ()), floor)


def _mig(mig: Any, need: int | None) -> GpuAsk:
    return MigSlices(mig.profile, mig.count)


def _share(share: Any, need: int | None) -> GpuAsk:
    return GpuShare(share.milli)


register_ask("whole", _whole)
register_ask("mig", _mig)
register_ask("share", _share)
