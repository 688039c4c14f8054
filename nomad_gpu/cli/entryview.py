"""How `status ID` and `sweep status ID` read: one entry's life in times, a sweep's progress in one bar.

Pure formatting of the API's payloads (no calls), so that tests feed it entries and read lines. Times
are shown in UTC with the seconds, durations as `queue` shows them; a field the service does not
know yet (a queued entry has not started) reads `-`, never a guess.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from nomad_gpu.api.payloads import Allocations, Entry, Placement
from nomad_gpu.cli.queueview import duration, short_model
from nomad_gpu.render import META_TRIAL, META_TRIAL_PREFIX

BAR_WIDTH = 40
DONE = ("complete",)
ACTIVE = ("admitted", "running")


def when(t: Any) -> str:
    if not isinstance(t, (int, float)):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(t)))


def status_lines(entry: Entry, nomad: Allocations | None, nomad_error: str | None,
                 node_names: Mapping[str, str]) -> list[tuple[str, str]]:
    """(label, value) lines for `status ID`: who, state, times, where it runs in Nomad."""
    lines: list[tuple[str, str]] = [("id", entry.id), ("name", entry.name), ("team", entry.team),
                                    ("priority", str(entry.priority)), ("state", entry.state)]
    if entry.held:
        lines.append(("held", "yes (release it to let it be admitted)"))
    if entry.reason:
        lines.append(("reason", entry.reason))
    if entry.state == "queued":  # the place in the order the scheduler decides in
        lines.append(("position", str(entry.position) if entry.position is not None
                      else "none: the scheduler does not consider it now (see reason)"))
    if entry.sweep:
        lines.append(("sweep", entry.sweep))
    times = (nomad.submitted_at, nomad.admitted_at, nomad.started_at, nomad.finished_at) if nomad is not None \
        else (entry.submitted_at, entry.admitted_at, None, entry.finished_at)  # the service's own timeline first
    lines += [(label, when(t)) for label, t in zip(("submitted", "admitted", "started", "finished"), times,
                                                    strict=True)]
    if nomad is not None:
        lines.append(("waited", duration(nomad.waited_s)))
        lines.append(("ran", duration(nomad.ran_s) if nomad.ran_s is not None else "-"))
    spec = entry.spec
    for key, label in (("runtime", "estimate"), ("max_runtime", "time limit")):
        if isinstance(spec.get(key), (int, float)):
            lines.append((label, duration(float(spec[key]))))
    lines.append(("attempt", f"{entry.attempts + 1} of {entry.max_retries + 1}"
                             + (f" ({entry.refusals} refused by Nomad)" if entry.refusals else "")))
    if entry.preemptions:  # each one a refusal too: it used no retry
        lines.append(("preempted", f"{entry.preemptions} time(s), no retry used"))
    lines += [("warning", text) for text in entry.warnings]
    unsent = "; not registered with Nomad yet" if entry.state == "queued" else ""
    lines.append(("nomad job", f"{entry.nomad_job_id} (namespace {entry.namespace}{unsent})"))
    lines += address_lines(entry)
    if nomad is not None:
        for a in nomad.allocations:
            node = a.node_name or node_names.get(a.node_id, a.node_id[:8])
            lines.append(("allocation", f"{a.id} {a.client_status} on {node} ({a.group}[{a.index}])"))
        if not nomad.allocations:
            lines.append(("allocation", "-"))
        if isinstance(nomad.nomad_ui, str) and nomad.nomad_ui:
            lines.append(("nomad ui", nomad.nomad_ui))
    elif nomad_error:
        lines.append(("allocation", f"(not read from Nomad: {nomad_error})"))
    for p in entry.placements:
        node = node_names.get(p.node, p.node)
        lines.append(("placement", f"{p.group}[{p.index}] on {node}: {','.join(p.instance_ids) or '-'}"
                                   + (f" share={p.share_milli}m" if p.share_milli else "")))
        if p.choice:  # what a workload class chose for the group, and why
            lines.append(("choice", p.choice))
        if p.link:
            lines.append(("gpus", gpu_set_line(p, node)))
    lines += [("unhealthy", text) for text in entry.device_health]  # Nomad leaves it running on them
    return lines


def address_lines(entry: Entry) -> list[tuple[str, str]]:
    """`address  http  10.0.0.2:23456 (service chat)`: where a running entry is reached; for a spec with
    ports that does not run yet, one line saying when the address will show."""
    service = _services(entry.spec)
    lines = [("address", f"{name}  {where}" + (f" (service {service[name]})" if name in service else ""))
             for name, where in sorted(entry.addresses.items())]
    if not lines and _has_ports(entry.spec) and entry.state in ACTIVE + ("queued",):
        lines.append(("address", "- (shown once Nomad reports the job running)"))
    return lines


def _has_ports(spec: Mapping[str, Any]) -> bool:
    return any(isinstance(g, Mapping) and g.get("ports") for g in spec.get("groups") or ())


def _services(spec: Mapping[str, Any]) -> dict[str, str]:
    """Port name -> the name of the service registered on it (its spec's `service:`)."""
    out: dict[str, str] = {}
    for group in spec.get("groups") or ():
        service = group.get("service") if isinstance(group, Mapping) else None
        if isinstance(service, Mapping) and isinstance(service.get("port"), str):
            out[service["port"]] = str(service.get("name"))
    return out


def gpu_set_line(p: Placement, node: str) -> str:
    """`4 x A100 on a100-1, NVLink`: a multi-GPU placement with how its GPUs reach each other."""
    model = short_model((p.device_name or "GPU").removeprefix("nvidia/gpu/"))
    return f"{len(p.instance_ids)} x {model} on {node}" + (f", {p.link}" if p.link else "")


def trial_params(entry: Entry) -> dict[str, str]:
    """A trial's parameters, from the meta its sweep gave it (`nomad_gpu_trial_<param>`)."""
    meta = entry.spec.get("meta") or {}
    return {k[len(META_TRIAL_PREFIX):]: str(v) for k, v in sorted(meta.items())
            if k.startswith(META_TRIAL_PREFIX) and k != META_TRIAL}


def progress(states: Mapping[str, int], total: int) -> dict[str, int]:
    """Done / running / queued / failed (and cancelled) counts of a sweep's trials."""
    return {"done": sum(states.get(s, 0) for s in DONE), "running": sum(states.get(s, 0) for s in ACTIVE),
            "queued": states.get("queued", 0), "failed": states.get("failed", 0),
            "cancelled": states.get("cancelled", 0), "total": total}


def progress_bar(counts: Mapping[str, int], width: int = BAR_WIDTH) -> str:
    """`[#####xx>>>>.........]`: done #, failed x, cancelled -, running >, queued ."""
    total = max(counts.get("total", 0), 1)
    parts = [("#", counts["done"]), ("x", counts["failed"]), ("-", counts["cancelled"]), (">", counts["running"])]
    bar, used = "", 0
    for mark, n in parts:
        cells = round(width * n / total)
        cells = min(cells, width - used)
        bar += mark * cells
        used += cells
    bar += "." * (width - used)
    ended = counts["done"] + counts["failed"] + counts["cancelled"]
    return (f"[{bar}] {ended}/{counts.get('total', 0)} ended: {counts['done']} done, {counts['running']} running, "
            f"{counts['queued']} queued, {counts['failed']} failed"
            + (f", {counts['cancelled']} cancelled" if counts["cancelled"] else ""))


def trial_rows(trials: Sequence[Entry], now: float) -> tuple[list[str], list[list[str]]]:
    """The table of trials: ID, name, state, each parameter, attempts, time run or waited."""
    names: list[str] = []
    for t in trials:
        names += [k for k in trial_params(t) if k not in names]
    rows = []
    for t in trials:
        params = trial_params(t)
        state = t.state
        if state == "queued":
            took = f"waiting {duration(now - t.submitted_at)}" if t.submitted_at else ""
        elif t.admitted_at is not None:
            end = t.finished_at if t.finished_at is not None else now
            took = duration(end - t.admitted_at)
        else:
            took = ""
        reason = t.reason if state in ("queued", "failed") else ""
        rows.append([t.id, t.name, state, *(params.get(n, "") for n in names), str(t.attempts + 1), took, reason])
    headers = ["ID", "TRIAL", "STATE", *(n.upper() for n in names), "ATTEMPT", "TIME", "REASON"]
    if not any(r[-1] for r in rows):  # nothing waits for a reason or failed: no empty column
        return headers[:-1], [r[:-1] for r in rows]
    return headers, rows
