"""The rows of `nomad-gpu inventory`: per node, and with `--devices` per device, who holds what.

A GPU cluster is read device by device: which GPU is free, which MIG instance is taken and by whom, how
much of a shared GPU its tenants use. Capacity is also summed in GPU-equivalents (DESIGN 3.3: a whole GPU
is 1, a MIG instance its compute slices over 7, a share its milli over 1000), the unit of quotas.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from nomad_gpu.cli.output import Column
from nomad_gpu.cli.queueview import short_model

NODE_COLUMNS = (Column("NODE"), Column("STATUS"), Column("GPUS FREE", right=True), Column("MIG FREE", right=True),
                Column("SHARES FREE", right=True), Column("GPU-EQ FREE", right=True),
                Column("CPU GHZ FREE", right=True), Column("MEM GIB FREE", right=True))
DEVICE_COLUMNS = (Column("NODE"), Column("DEVICE"), Column("KIND"), Column("MODEL"), Column("USE"),
                  Column("HELD BY", shrink=True))

_SLICES = re.compile(r"^(\d+)g\.")


def mig_equivalents(profile: str) -> float:
    """`3g.40gb` -> 3/7 of a GPU (compute slices over the 7 of a full GPU)."""
    m = _SLICES.match(profile or "")
    return int(m.group(1)) / 7 if m else 0.0


def free_equivalents(node: Mapping[str, Any]) -> float:
    whole = sum(1.0 for g in node["gpus"] if g["mode"] == "whole" and g["healthy"] and g["free_milli"] >= 1000)
    shared = sum(g["free_milli"] / 1000 for g in node["gpus"] if g["mode"] != "whole" and g["healthy"])
    migs = sum(mig_equivalents(m.get("profile", "")) for m in node["migs"] if m["free"] and m["healthy"])
    return whole + shared + migs


def node_row(n: Mapping[str, Any]) -> tuple[Any, ...]:
    whole = [g for g in n["gpus"] if g["mode"] == "whole"]
    shared = [g for g in n["gpus"] if g["mode"] != "whole"]
    return (n["name"] or n["id"], n["status"] + ("" if n["schedulable"] else " (unschedulable)"),
            f"{sum(g['free_milli'] == 1000 for g in whole)}/{len(whole)}",
            f"{sum(m['free'] for m in n['migs'])}/{len(n['migs'])}",
            f"{sum(g['free_milli'] for g in shared)}/{1000 * len(shared)}m", f"{free_equivalents(n):.2f}",
            f"{n['cpu_free'] / 1000:g}/{n['cpu_mhz'] / 1000:g}",
            f"{n['memory_free'] // 1024}/{n['memory_mb'] // 1024}")


def _held_by(holders: Iterable[Mapping[str, Any]]) -> str:
    parts = []
    for h in holders:
        who = str(h.get("entry") or "another team")
        milli = h.get("milli")
        parts.append(f"{who} ({milli}m)" if milli is not None and milli != 1000 else who)
    return ", ".join(parts)


def device_rows(n: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """One row per GPU and MIG instance: whole GPUs free/used, shared GPUs by milli in use, MIG instances
    with their profile (as a bar of its compute slices: `###....` is 3g of 7)."""
    node = n["name"] or n["id"]
    rows: list[tuple[Any, ...]] = []
    for g in n["gpus"]:
        if not g["healthy"]:
            use = "unhealthy"
        elif g["mode"] == "whole":
            use = "free" if g["free_milli"] >= 1000 else "used"
        else:
            use = f"{1000 - g['free_milli']}/1000m"
        rows.append((node, g["id"], "gpu" if g["mode"] == "whole" else "shared", short_model(g["model"]), use,
                     _held_by(g.get("holders") or [])))
    for m in n["migs"]:
        profile = m.get("profile", "")
        slices = round(mig_equivalents(profile) * 7)
        bar = "#" * slices + "." * (7 - slices)
        use = "unhealthy" if not m["healthy"] else ("free" if m["free"] else "used")
        rows.append((node, m["id"], f"mig {profile} {bar}", short_model(m["device"].split(" MIG ")[0]), use,
                     _held_by(m.get("holders") or [])))
    return rows
