"""Quantities with units in device constraints (`${device.attr.memory} >= "40 GiB"`).

Nomad compares device attributes with units by converting both sides to the same base unit, and
only within one base (bytes, byte rates, hertz, watts: reference section 7). This is that rule for
the handful of units the nvidia plugin reports, kept apart so placement reads as policy only.
"""

from __future__ import annotations

import re

_UNITS: dict[str, tuple[str, float]] = {
    # bytes: SI with kB/KB, binary with KiB
    "B": ("byte", 1), "kB": ("byte", 1e3), "KB": ("byte", 1e3), "MB": ("byte", 1e6), "GB": ("byte", 1e9),
    "TB": ("byte", 1e12), "PB": ("byte", 1e15), "EB": ("byte", 1e18),
    "KiB": ("byte", 2**10), "MiB": ("byte", 2**20), "GiB": ("byte", 2**30), "TiB": ("byte", 2**40),
    "PiB": ("byte", 2**50), "EiB": ("byte", 2**60),
    # byte rates
    "B/s": ("byterate", 1), "kB/s": ("byterate", 1e3), "KB/s": ("byterate", 1e3), "MB/s": ("byterate", 1e6),
    "GB/s": ("byterate", 1e9), "KiB/s": ("byterate", 2**10), "MiB/s": ("byterate", 2**20),
    "GiB/s": ("byterate", 2**30),
    # frequency and power
    "MHz": ("hertz", 1e6), "GHz": ("hertz", 1e9),
    "mW": ("watt", 1e-3), "W": ("watt", 1), "kW": ("watt", 1e3), "MW": ("watt", 1e6), "GW": ("watt", 1e9),
}
_QUANTITY_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z/]*)\s*$")


def parse_quantity(text: str) -> tuple[float, str] | None:
    """`"40 GiB"` -> (40.0, "GiB"); `"12"` -> (12.0, ""); None when it is not a quantity."""
    match = _QUANTITY_RE.match(text)
    if match is None:
        return None
    return float(match[1]), match[2]


def compare_quantities(value: float, unit: str, operand: str, wanted: str) -> bool:
    """`value unit <operand> wanted`; False when `wanted` is not comparable (other base unit)."""
    parsed = parse_quantity(wanted)
    if parsed is None:
        return False
    number, wanted_unit = parsed
    if wanted_unit:
        have, want = _UNITS.get(unit), _UNITS.get(wanted_unit)
        if have is None or want is None or have[0] != want[0]:
            return False
        left, right = value * have[1], number * want[1]
    else:
        left, right = value, number
    if operand in ("=", "==", "is"):
        return left == right
    if operand in ("!=", "not"):
        return left != right
    return {
        "<": left < right,
        "<=": left <= right,
        ">": left > right,
        ">=": left >= right,
    }.get(operand, False)
