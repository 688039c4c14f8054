"""How `status ID` and `sweep status ID` read: one entry's life in times, a sweep's progress in one bar.

Pure formatting of the API's JSON (no calls), so that tests feed it entries and read lines. Times
are shown in UTC with the seconds, durations as `queue` shows them; a field the service does not
know yet (a queued entry has not started) reads `-`, never a guess.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from nomad_gpu.cli.queueview import duration
from nomad_gpu.render import META_TRIAL, META_TRIAL_PREFIX

BAR_WIDTH = 40
DONE = ("complete",)
ACTIVE = ("admitted", "running")


def when(t: Any) -> str:
    if not isinstance(t, (int, float)):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(t)))


def status_lines(entry: Mapping[str, Any], nomad: Mapping[str, Any] | None, nomad_error: str | None,
                 node_names: Mapping[str, str]) -> list[tuple[str, str]]:
    """(label, value) lines for `status ID`: who, state, times, where it runs in Nomad."""
    lines: list[tuple[str, str]] = [(k, str(entry.get(k) if entry.get(k) is not None else "-"))
                                    for k in ("id", "name", "team", "priority", "state")]
    if entry.get("held"):
        lines.append(("held", "yes (release it to let it be admitted)"))
    if entry.get("reason"):
        lines.append(("reason", str(entry["reason"])))
    if entry.get("sweep"):
        lines.append(("sweep", str(entry["sweep"])))
    times = nomad or entry
    lines += [("submitted", when(times.get("submitted_at"))), ("admitted", when(times.get("admitted_at"))),
              ("started", when(times.get("started_at"))), ("finished", when(times.get("finished_at")))]
    if nomad is not None:
        lines.append(("waited", duration(float(nomad["waited_s"])) if nomad.get("waited_s") is not None else "-"))
        lines.append(("ran", duration(float(nomad["ran_s"])) if nomad.get("ran_s") is not None else "-"))
    spec = entry.get("spec") or {}
    for key, label in (("runtime", "estimate"), ("max_runtime", "time limit")):
        if isinstance(spec.get(key), (int, float)):
            lines.append((label, duration(float(spec[key]))))
    attempt, retries = int(entry.get("attempts") or 0), int(entry.get("max_retries") or 0)
    lines.append(("attempt", f"{attempt + 1} of {retries + 1}"
                             + (f" ({entry['refusals']} refused by Nomad)" if entry.get("refusals") else "")))
    lines.append(("nomad job", f"{entry.get('nomad_job_id')} (namespace {entry.get('namespace', 'default')})"))
    if nomad is not None:
        for a in nomad.get("allocations") or []:
            node = a.get("node_name") or node_names.get(str(a.get("node_id")), str(a.get("node_id") or "")[:8])
            lines.append(("allocation", f"{a['id']} {a.get('client_status')} on {node} "
                                        f"({a.get('group')}[{a.get('index')}])"))
        if not nomad.get("allocations"):
            lines.append(("allocation", "-"))
        if nomad.get("nomad_ui"):
            lines.append(("nomad ui", str(nomad["nomad_ui"])))
    elif nomad_error:
        lines.append(("allocation", f"(not read from Nomad: {nomad_error})"))
    for p in entry.get("placements") or []:
        node = node_names.get(str(p["node"]), str(p["node"]))
        lines.append(("placement", f"{p['group']}[{p['index']}] on {node}: {','.join(p['instance_ids']) or '-'}"
                                   + (f" share={p['share_milli']}m" if p.get("share_milli") else "")))
    return lines


def trial_params(entry: Mapping[str, Any]) -> dict[str, str]:
    """A trial's parameters, from the meta its sweep gave it (`nomad_gpu_trial_<param>`)."""
    meta = (entry.get("spec") or {}).get("meta") or {}
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


def trial_rows(trials: Sequence[Mapping[str, Any]], now: float) -> tuple[list[str], list[list[str]]]:
    """The table of trials: ID, name, state, each parameter, attempts, time run or waited."""
    names: list[str] = []
    for t in trials:
        names += [k for k in trial_params(t) if k not in names]
    rows = []
    for t in trials:
        params = trial_params(t)
        state = str(t.get("state"))
        if state == "queued":
            took = f"waiting {duration(now - float(t['submitted_at']))}" if t.get("submitted_at") else ""
        elif t.get("admitted_at") is not None:
            end = float(t["finished_at"]) if t.get("finished_at") is not None else now
            took = duration(end - float(t["admitted_at"]))
        else:
            took = ""
        reason = str(t.get("reason") or "") if state in ("queued", "failed") else ""
        rows.append([str(t.get("id")), str(t.get("name")), state, *(params.get(n, "") for n in names),
                     str(int(t.get("attempts") or 0) + 1), took, reason])
    headers = ["ID", "TRIAL", "STATE", *(n.upper() for n in names), "ATTEMPT", "TIME", "REASON"]
    if not any(r[-1] for r in rows):  # nothing waits for a reason or failed: no empty column
        return headers[:-1], [r[:-1] for r in rows]
    return headers, rows
