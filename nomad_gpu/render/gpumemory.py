"""`gpu_memory`: how much GPU memory a workload needs, in the user's terms, read exactly.

A spec states its size as a number of GiB (``14``, ``9.5``) or as text with a unit (``"14GiB"``,
``"15GB"``, ``"14336MiB"``). The service compares it with the memory Nomad reports for each device (the
fingerprint's ``memory`` attribute, whole MiB), so the need is kept as an exact whole number of bytes,
rounded up: a decimal like 9.75 GiB is read as text, never through a binary float, and a need one
byte above what a device has does not fit it. Binary units (KiB, MiB, GiB, TiB) are powers of 1024,
decimal ones (kB, MB, GB, TB) powers of 1000, as Nomad's own unit table reads them.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from nomad_gpu.render.textrules import capped, shown

__all__ = ["GIB", "GPU_MEMORY_CAP", "GPU_MEMORY_MAX_BYTES", "MIB", "UNITS", "gpu_memory_bytes", "mib_covering"]

MIB = 1 << 20
GIB = 1 << 30
UNITS: dict[str, int] = {
    "KiB": 1 << 10, "MiB": MIB, "GiB": GIB, "TiB": 1 << 40,
    "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
}
"""Accepted units, spelled as Nomad spells them (`plugins/shared/structs/units.go`, v2.0.5: KiB..EiB binary,
kB/KB..EB decimal); a lower-case ``gb`` or ``gib`` is refused rather than guessed."""
GPU_MEMORY_MAX_BYTES = 16 << 40
"""16 TiB: far above any GPU's memory; a larger ask is a typo, refused at submission."""
GPU_MEMORY_CAP = 64
"""Characters of a size written as text at most (`14336MiB` needs 8)."""
_TEXT = re.compile(r"(?P<num>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[A-Za-z]*)")
"""Read after the text is stripped: one run of spaces, between the number and the unit, so no two
quantifiers can take the same spaces (`\\s*` on both sides of an optional unit tried every split of a run
of spaces, a cost that grew with the square of its length)."""
_SPELLINGS = "a number of GiB or text like '14GiB', '15GB', '14336MiB'"


def gpu_memory_bytes(value: object) -> int:
    """The need in bytes (rounded up to a whole byte). Raises ValueError with one line on anything else."""
    if isinstance(value, bool):
        raise ValueError(f"must be {_SPELLINGS}, got {shown(value)}")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"must be {_SPELLINGS}, got {shown(value)}")
        amount, unit = _decimal(repr(value) if isinstance(value, float) else str(value)), GIB
    elif isinstance(value, str):
        match = _TEXT.fullmatch(capped(value, GPU_MEMORY_CAP).strip())
        if match is None:
            raise ValueError(f"must be {_SPELLINGS}, got {shown(value)}")
        if not match.group("unit"):
            raise ValueError(f"text needs a unit (KiB, MiB, GiB, TiB, kB, MB, GB, TB), got {shown(value)}; "
                             "a bare number is GiB")
        if match.group("unit") not in UNITS:
            raise ValueError(f"unknown unit {match.group('unit')!r} in {shown(value)}; "
                             "use KiB, MiB, GiB, TiB, kB, MB, GB or TB")
        amount, unit = _decimal(match.group("num")), UNITS[match.group("unit")]
    else:
        raise ValueError(f"must be {_SPELLINGS}, got {type(value).__name__}")
    need = math.ceil(amount * unit)
    if need <= 0:
        raise ValueError(f"must be more than 0, got {shown(value)}")
    if need > GPU_MEMORY_MAX_BYTES:
        raise ValueError(f"must be at most 16TiB, got {shown(value)}")
    return need


def _decimal(text: str) -> Decimal:
    try:
        amount = Decimal(text)
    except InvalidOperation as exc:
        raise ValueError(f"must be {_SPELLINGS}, got {shown(text)}") from exc
    if not amount.is_finite():
        raise ValueError(f"must be {_SPELLINGS}, got {shown(text)}")
    return amount


def mib_covering(need_bytes: int) -> int:
    """The fewest whole MiB that hold `need_bytes`: a device reporting this many MiB or more fits."""
    return -(-need_bytes // MIB)

