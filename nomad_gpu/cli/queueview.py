"""The rows of `nomad-gpu queue`: what each entry asks for, how long it has waited, where it runs.

The service's entry (`nomad_gpu.api.payloads.Entry`) is stored data (the validated spec, placements by
node ID); people ask "what does it want", "how long has it waited" and "on which node". This module
answers those from one entry and a map of node IDs to names (the API's inventory view), with no I/O of
its own, so it is tested as a table of entries. `--json` keeps printing the entries themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nomad_gpu.api.payloads import Entry, Placement, Usage
from nomad_gpu.cli.output import Column
from nomad_gpu.domain.modelnames import short_model

__all__ = ["QUEUE_COLUMNS", "QUEUE_WIDE_COLUMNS", "SORTS", "TERMINAL_COLUMNS", "TERMINAL_WIDE_COLUMNS", "eta_of",
           "position_of", "queue_row", "request_of", "short_model", "sort_key", "terminal_row", "usage_note",
           "waited"]

_BASE = (Column("ID"), Column("NAME", shrink=True), Column("TEAM", shrink=True), Column("PRIO", right=True),
         Column("STATE"), Column("REQUEST", shrink=True), Column("WAITED", right=True), Column("ETA", right=True))
_WIDE = (Column("NAMESPACE", shrink=True), Column("SWEEP", shrink=True), Column("ATTEMPTS", right=True),
         Column("NOMAD JOB", shrink=True))
_POS = Column("POS", right=True)
QUEUE_COLUMNS = (*_BASE, Column("WHY / WHERE", shrink=True), _POS)
"""Piped `queue`: the columns scripts read, in their order; POS (added later) comes last."""
QUEUE_WIDE_COLUMNS = (*_BASE, *_WIDE, Column("WHY / WHERE", shrink=True), _POS)
TERMINAL_COLUMNS = (_POS, *_BASE)
"""`queue` on a terminal: position first; why it waits or where it runs on a line under the row."""
TERMINAL_WIDE_COLUMNS = (_POS, *_BASE, *_WIDE)

_WAITING = ("queued",)


def _model_of(device_name: str | None) -> str | None:
    """A whole GPU's device name is its model; a MIG device's is `<model> MIG <profile>`."""
    if not device_name:
        return None
    return device_name.split(" MIG ", 1)[0].removeprefix("nvidia/gpu/")


def _group_request(group: Mapping[str, Any], placed_model: str | None, wide: bool,
                   job_class: str | None = None) -> str | None:
    count = int(group.get("count") or 1)
    times = f"{count} x " if count > 1 else ""
    if gpu := group.get("gpu"):
        n = int(gpu.get("count") or 1) * count
        models = [str(m) for m in gpu.get("models") or []]
        model = placed_model or (models[0] if len(models) == 1 else None)
        name = (model if wide else short_model(model)) if model else ("GPU" if not models else
                                                                        "/".join(short_model(m) for m in models))
        return f"{n} x {name}"
    if mig := group.get("mig"):
        n = int(mig.get("count") or 1) * count
        return f"{n} x mig {mig.get('profile')}" if n > 1 else f"mig {mig.get('profile')}"
    if share := group.get("share"):
        return f"{times}share {int(share.get('milli') or 0)}m"
    if cls := group.get("class") or job_class or ("hpo" if group.get("gpu_memory") is not None else None):
        memory = group.get("gpu_memory")  # the kind is the class's choice: `serving 14GiB`
        return f"{times}{cls}" + (f" {memory}" if memory is not None else "")
    return None


def request_of(entry: Entry, wide: bool = False) -> str:
    """`2 x A100`, `mig 3g.40gb`, `share 250m`; groups joined with ` + `; `cpu only` without a GPU."""
    spec = entry.spec  # the user's validated spec document, as stored
    placed: dict[str, str] = {}
    for p in entry.placements:
        model = _model_of(p.device_name)
        if model:
            placed.setdefault(p.group, model)
    parts = [part for g in spec.get("groups") or []
             if (part := _group_request(g, placed.get(str(g.get("name"))), wide, spec.get("class"))) is not None]
    return " + ".join(parts) if parts else "cpu only"


def duration(seconds: float) -> str:
    """Short and sortable by eye: `45s`, `12m`, `3h05m`, `2d04h`."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def waited(entry: Entry, now: float) -> str:
    """How long the entry waited for its place: until now while queued, until admission after."""
    end = entry.admitted_at
    if end is None:
        end = now if entry.state in _WAITING else entry.finished_at
    return duration(end - entry.submitted_at) if end is not None else ""


def where(entry: Entry, node_names: Mapping[str, str], wide: bool = False) -> str:
    """`gpu-a800-1: 2 devices` (or `250 milli-GPU`); --wide lists the exact instance IDs."""
    by_node: dict[str, list[Placement]] = {}
    for p in entry.placements:
        by_node.setdefault(p.node, []).append(p)
    parts = []
    for node, ps in sorted(by_node.items(), key=lambda kv: node_names.get(kv[0], kv[0])):
        name = node_names.get(node) or node[:8]
        share = sum(p.share_milli for p in ps)
        if wide:
            ids = [i for p in ps for i in p.instance_ids]
            parts.append(f"{name}: {','.join(ids)}" + (f" ({share}m)" if share else ""))
            continue
        devices = sum(len(p.instance_ids) for p in ps)
        held = f"{share} milli-GPU" if share else (f"{devices} device{'s' if devices != 1 else ''}" if devices
                                                   else "no GPU")
        links = sorted({p.link for p in ps if p.link})  # how a multi-GPU set is joined: `NVLink`, `PCIe`, ...
        parts.append(f"{name}: {held}" + (f", {'/'.join(links)}" if links else ""))
    return "; ".join(parts)


def usage_note(entry: Entry, now: float) -> str:
    """`7% util, 3.2/80 GiB` for a running entry whose devices report figures; `IDLE 35m` leads when its
    GPUs are held but idle (the service's idle rule). Empty while nothing is known."""
    usage = entry.usage if isinstance(entry.usage, Usage) else Usage()
    parts = []
    if usage.idle:
        since = usage.idle_since
        parts.append("IDLE" + (f" {duration(now - since)}" if since is not None else ""))
    if usage.gpu_util_pct is not None:
        parts.append(f"{usage.gpu_util_pct:.0f}% util")
    used, total = usage.gpu_memory_used_mib, usage.gpu_memory_total_mib
    if used is not None:
        parts.append(f"{used / 1024:.1f}" + (f"/{total / 1024:.0f}" if total else "") + " GiB")
    return ", ".join(parts)


def estimate_of(entry: Entry) -> str:
    """What a queued entry's ETA rests on when it is not the specs' own `runtime:` (`estimate from class
    training default`); empty otherwise."""
    basis = entry.eta_basis if isinstance(entry.eta_basis, str) else ""
    return basis if basis.startswith("estimate") and isinstance(entry.eta, float) else ""


def eta_of(entry: Entry, now: float, *, short: bool = False) -> str:
    """A queued entry's expected start (the service's forecast over runtime estimates): `in 12m`, `now`,
    `unknown` where nothing says when capacity frees; blank for entries no longer waiting. One that rests on
    the operator's defaults says so: `in 2h (estimate from class training default)`, or `~in 2h` where
    `short` (the table's note line names the defaults)."""
    if entry.state not in _WAITING:
        return ""
    if entry.held:
        return "held"
    eta = entry.eta
    if not isinstance(eta, float):
        return "unknown"
    ahead = eta - now
    text = "now" if ahead < 1 else f"in {duration(ahead)}"
    if estimate := estimate_of(entry):
        return f"~{text}" if short else f"{text} ({estimate})"
    return text


def position_of(entry: Entry) -> str:
    """The place in the scheduler's order (`1`: decided first); `-` for a queued entry with none."""
    if entry.position is not None:
        return str(entry.position)
    return "-" if entry.state in _WAITING else ""


SORTS = ("position", "submitted", "priority", "name")
"""`queue --sort`: position (the scheduler's order; the default), submitted, priority or name."""
_LIVE = ("admitted", "running", "preempting")


def sort_key(how: str) -> Any:
    """The key `queue --sort` orders entries by. By position: what runs first, then the queue in the order
    the scheduler decides in, then the queued entries it does not consider (held, waiting for `after:`,
    beyond max_parallel) by age, then history."""
    if how == "submitted":
        return lambda e: (e.submitted_at, e.id)
    if how == "priority":
        return lambda e: (-e.priority, e.submitted_at, e.id)
    if how == "name":
        return lambda e: (e.name, e.id)

    def by_position(e: Entry) -> tuple[int, int, float, str]:
        if e.state in _LIVE:
            return (0, 0, e.submitted_at, e.id)
        if e.state in _WAITING:
            return (1, e.position, e.submitted_at, e.id) if e.position is not None else (2, 0, e.submitted_at, e.id)
        return (3, 0, e.submitted_at, e.id)
    return by_position


def why_of(entry: Entry, node_names: Mapping[str, str], now: float, wide: bool = False) -> str:
    """Why it waits, or where it runs (with its utilisation)."""
    why = entry.reason or where(entry, node_names, wide)
    choices = list(dict.fromkeys(p.choice for p in entry.placements if p.choice))
    if wide and choices and not entry.reason:  # what a workload class chose, and why
        why = f"{'; '.join(choices)} [{why}]"
    if note := usage_note(entry, now):
        why = f"{why} ({note})" if why else note
    return why


def terminal_row(entry: Entry, node_names: Mapping[str, str], now: float, wide: bool = False
                 ) -> tuple[tuple[Any, ...], str]:
    """A row for a terminal (`TERMINAL_COLUMNS`, position first) and the note printed under it: why it
    waits or where it runs, and what an estimated ETA rests on."""
    base: tuple[Any, ...] = (position_of(entry), entry.id, entry.name, entry.team, entry.priority, entry.state,
                             request_of(entry, wide), waited(entry, now), eta_of(entry, now, short=True))
    note = why_of(entry, node_names, now, wide)
    if entry.state in _WAITING and (estimate := estimate_of(entry)):
        note = f"{note}; ETA {estimate}" if note else f"ETA {estimate}"
    if wide:
        base = (*base, entry.namespace, entry.sweep or "", entry.attempts, entry.nomad_job_id)
    return base, note


def queue_row(entry: Entry, node_names: Mapping[str, str], now: float, wide: bool = False) -> tuple[Any, ...]:
    """A row for a pipe (`QUEUE_COLUMNS`): the columns scripts read, the position appended last."""
    why = why_of(entry, node_names, now, wide)
    base = (entry.id, entry.name, entry.team, entry.priority, entry.state, request_of(entry, wide),
            waited(entry, now), eta_of(entry, now))
    if not wide:
        return (*base, why, position_of(entry))
    return (*base, entry.namespace, entry.sweep or "", entry.attempts, entry.nomad_job_id, why, position_of(entry))
