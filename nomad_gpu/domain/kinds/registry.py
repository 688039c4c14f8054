"""The registry of GPU kinds: the built-in three, and any a deployment or a test adds.

The free-capacity index asks every registered kind what a node offers, in registration order; a
placement names its kind (`AllocPlacement.kind`), and the adapters in `render/` and `nomad/` are
registered under the same name. Registering a kind is all a new kind needs from the core.
"""

from __future__ import annotations

from nomad_gpu.domain.kinds.base import GpuKind
from nomad_gpu.domain.kinds.mig import MIG
from nomad_gpu.domain.kinds.share import SHARE
from nomad_gpu.domain.kinds.whole import WHOLE
from nomad_gpu.domain.placement import AllocPlacement

_KINDS: dict[str, GpuKind] = {}
_ORDER: list[GpuKind] = []
_SIZED: dict[str, bool] = {}


def register(kind: GpuKind) -> GpuKind:
    """Add `kind` (idempotent for the same object); a second kind under a taken name is a bug."""
    found = _KINDS.get(kind.name)
    if found is kind:
        return kind
    if found is not None:
        raise ValueError(f"a GPU kind named {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    _ORDER.append(kind)
    _SIZED[kind.name] = kind.sized
    return kind


def unregister(name: str) -> None:
    """Remove a kind added by `register` (tests that define their own kind clean up with it)."""
    kind = _KINDS.pop(name, None)
    if kind is not None:
        _ORDER.remove(kind)
        del _SIZED[name]


def kinds() -> tuple[GpuKind, ...]:
    """Every registered kind, in registration order (the built-ins first: whole, mig, share)."""
    return tuple(_ORDER)


def kind_named(name: str) -> GpuKind:
    """The kind registered as `name`; KeyError if none is."""
    return _KINDS[name]


def sized(name: str) -> bool:
    """`GpuKind.sized` of the kind named `name` (the index's totals, looked up per key)."""
    return _SIZED[name]


def kind_of(p: AllocPlacement) -> GpuKind | None:
    """The kind of a placement: the one it names, else the first that claims it; None for CPU only."""
    if p.kind:
        return _KINDS.get(p.kind)
    for kind in _ORDER:
        if kind.claims(p):
            return kind
    return None


for _builtin in (WHOLE, MIG, SHARE):
    register(_builtin)
