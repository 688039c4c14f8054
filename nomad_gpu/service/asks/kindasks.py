"""The service side of each GPU kind: the core's ask a spec group's kind field becomes, and back.

The spec's kind fields are render's (`render/speckinds.py`: ``gpu:``, ``mig:``, ``share:``, and any
registered), the asks are the core's (`domain/kinds`); the render layer may not import the core, so the
step between them is registered here, by the core's kind name. A new kind adds its builder with
`register_ask`; `service/asks/translate.py` names no kind. A kind a workload class may choose also says how
a placement of it is written back as its field (``written``: `service/asks/classes.py` `resolved`), so that a
class-chosen group renders exactly as a spec naming that kind does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.requests import GpuAsk, GpuShare, MigSlices, WholeGpus
from nomad_gpu.domain.units import split_mig_device_name
from nomad_gpu.render.groupspec import GpuSpec, MigSpec, ShareSpec

__all__ = ["AskBuilder", "Writer", "ask_for", "register_ask", "unregister_ask", "written_field"]

AskBuilder = Callable[[Any, int | None], GpuAsk]
"""(the kind field's validated value, the group's `gpu_memory` in bytes or None) -> the core's ask."""

Writer = Callable[[AllocPlacement, str], tuple[str, Any]]
"""(a placement of the kind, its group's name) -> (the kind's field, its value) as a spec would write it."""

_BUILDERS: dict[str, AskBuilder] = {}
_WRITERS: dict[str, Writer] = {}


def register_ask(kind: str, build: AskBuilder, written: Writer | None = None) -> None:
    """Add the ask builder of the core's kind ``kind`` (a second builder for a kind is a bug) and, for a kind
    a class may choose, its writer."""
    found = _BUILDERS.get(kind)
    if found is not None and found is not build:
        raise ValueError(f"an ask builder for kind {kind!r} is already registered")
    _BUILDERS[kind] = build
    if written is not None:
        _WRITERS[kind] = written


def unregister_ask(kind: str) -> None:
    _BUILDERS.pop(kind, None)
    _WRITERS.pop(kind, None)


def written_field(kind: str, p: AllocPlacement, group: str) -> tuple[str, Any]:
    """The field and value a spec naming the placed kind would have (a class chose it for ``group``)."""
    writer = _WRITERS.get(kind)
    if writer is None:
        raise InvalidRequest(f"groups[{group}]: no class may choose GPU kind {kind!r}")
    return writer(p, group)


def ask_for(kind: str, value: Any, need: int | None) -> GpuAsk:
    """The core's ask for a kind field's ``value``; InvalidRequest when the kind has no builder here."""
    build = _BUILDERS.get(kind)
    if build is None:
        raise InvalidRequest(f"no GPU kind {kind!r} in this service")
    return build(value, need)


def _whole(gpu: Any, need: int | None) -> GpuAsk:
    # `gpu_memory` beside `gpu:`: whole GPUs whose memory holds it
    floor = gpu.min_memory_mib or (-(-need // (1 << 20)) if need is not None else 0)
    return WholeGpus(gpu.count, frozenset(gpu.models or ()), floor, bool(getattr(gpu, "nvlink", False)))


def _mig(mig: Any, need: int | None) -> GpuAsk:
    return MigSlices(mig.profile, mig.count)


def _share(share: Any, need: int | None) -> GpuAsk:
    return GpuShare(share.milli)


def _whole_written(p: AllocPlacement, group: str) -> tuple[str, Any]:
    return "gpu", GpuSpec.model_construct(count=len(p.instance_ids), models=None, min_memory_mib=None)


def _mig_written(p: AllocPlacement, group: str) -> tuple[str, Any]:
    split = split_mig_device_name(p.device_name or "")
    if split is None:
        raise InvalidRequest(f"groups[{group}]: a MIG placement without a MIG device name")
    return "mig", MigSpec.model_construct(profile=split[1], count=len(p.instance_ids))


def _share_written(p: AllocPlacement, group: str) -> tuple[str, Any]:
    return "share", ShareSpec.model_construct(milli=p.share_milli)


register_ask("whole", _whole, _whole_written)
register_ask("mig", _mig, _mig_written)
register_ask("share", _share, _share_written)
