"""GPU model names as users see them, and the exact names Nomad's fingerprints use.

Nomad names a device group by the driver's product name (`NVIDIA A100-SXM4-80GB`, `NVIDIA H100 80GB
HBM3`) and a job's device block must name it exactly. Our views print short forms (the queue `A100`,
the dashboard `A100-80GB`), and a user copies what they see. This module is the one place that says
which spellings stand for which exact name: case-insensitive, with or without the vendor, `-`, `_` and
spaces alike, any leading run of the name's words (`H100 80GB`), and the views' short forms. The fleet
decides: a spelling that stands for one model of the fleet becomes that model; one that stands for
several is ambiguous and is answered with the candidates, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_VENDOR = re.compile(r"^(?:NVIDIA|Tesla|AMD|Intel)\s+", re.IGNORECASE)
_FORM_FACTOR = re.compile(r"-(?:SXM\d*|PCIE)", re.IGNORECASE)


def short_model(model: str) -> str:
    """`NVIDIA A100-SXM4-80GB` -> `A100`, `NVIDIA H100 80GB HBM3` -> `H100`, `NVIDIA RTX 6000 Ada` -> `RTX 6000`:
    what the queue and the inventory print."""
    rest = _VENDOR.sub("", model.strip())
    tokens = [t for t in re.split(r"[\s-]+", rest) if t]
    if not tokens:
        return model.strip() or "GPU"
    if not any(c.isdigit() for c in tokens[0]) and len(tokens) > 1:
        return f"{tokens[0]} {tokens[1]}"
    return tokens[0]


def board_model(model: str) -> str:
    """`NVIDIA A100-SXM4-80GB` -> `A100-80GB`: the dashboard's form (no vendor, no form factor)."""
    return _FORM_FACTOR.sub("", _VENDOR.sub("", model.strip()))


def _words(text: str) -> tuple[str, ...]:
    return tuple(w for w in re.split(r"[\s_-]+", text.strip().casefold()) if w)


def spelled_as(written: str, model: str) -> bool:
    """Whether a user's ``written`` name stands for the exact ``model``."""
    words = _words(written)
    if not words:
        return False
    full = _words(model)
    bare = _words(_VENDOR.sub("", model.strip()))
    board = _words(board_model(model))
    if words in (full, bare, board, _words(short_model(model))):
        return True
    return any(len(words) <= len(form) and form[:len(words)] == words for form in (full, bare, board))


@dataclass(frozen=True)
class Resolved:
    """What a written model name became: the exact names it stands for in the fleet (one, or the
    candidates of an ambiguous spelling; none when the fleet has no such model)."""

    written: str
    models: tuple[str, ...]

    @property
    def exact(self) -> str | None:
        return self.models[0] if len(self.models) == 1 else None


def resolve(written: str, fleet_models: Iterable[str]) -> Resolved:
    """The fleet's models ``written`` stands for; an exact name always stands for itself alone."""
    known = sorted(set(fleet_models))
    if written in known:
        return Resolved(written, (written,))
    return Resolved(written, tuple(m for m in known if spelled_as(written, m)))
