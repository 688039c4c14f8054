"""The chaos run's verdict, from the outside: the dev cluster's audit and the service's public API.

Apart from the run (chaos.py) because the same judgement serves every run that drives the service
against the dev cluster (the replicated run, replicas.py, too), and because it is pure: an audit and
the entries in, a report out, so it can be read without the processes and faults that fed it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .devicehealth import placed_while_unhealthy
from .tenancy import device_overlaps, live_tenants_max, ran_at_once, still_live

_JOB_ID = re.compile(r"^ngpu-(?:[0-9a-f]{6}-)?(?P<entry>q\d{6,})(?:-\d+)?$")
TERMINAL = ("complete", "failed", "cancelled")


def judge(audit: dict[str, Any], entries: list[dict[str, Any]], acked: dict[str, dict[str, Any]],
          cancelled_at: dict[str, float], faults: list[dict[str, Any]], kinds: set[str]) -> dict[str, Any]:
    """Everything from the audit: ran once, never overlapped, nothing left, no stranger, few requests."""
    allocs = audit["allocations"]
    by_entry: dict[str, list[dict[str, Any]]] = {}
    unknown_jobs: set[str] = set()
    acked_ids = {e["id"] for e in acked.values()}
    for a in allocs:
        m = _JOB_ID.match(a["job_id"])
        if m is None or m["entry"] not in acked_ids:
            unknown_jobs.add(a["job_id"])
            continue
        by_entry.setdefault(m["entry"], []).append(a)
    for job in audit.get("jobs", []):
        m = _JOB_ID.match(job["job_id"])
        if m is None or m["entry"] not in acked_ids:
            unknown_jobs.add(job["job_id"])
    state = {e["id"]: e for e in entries}
    ran_twice, lost, unknown_outcome, not_stopped, stop_s = [], [], [], [], []
    for entry_id in sorted(acked_ids):
        started = [a for a in by_entry.get(entry_id, []) if a.get("started_at") is not None]
        final = state.get(entry_id, {}).get("state")
        if entry_id in cancelled_at:
            for a in started:
                end = a.get("finished_at") or math.inf
                if a["started_at"] <= cancelled_at[entry_id]:
                    stop_s.append(max(0.0, end - cancelled_at[entry_id]))
            if ran_at_once(started) or sum(1 for a in started if a.get("lost_at") is None) > 1:
                ran_twice.append(entry_id)
            continue
        # twice: two runs at once, or two that were not cut off (a lost attempt runs again by design)
        if ran_at_once(started) or sum(1 for a in started if a.get("lost_at") is None) > 1:
            ran_twice.append(entry_id)
        ok = [a for a in started if a["client_status"] == "complete" and a["desired_status"] == "run"
              and not a.get("stopped_by_client")]  # a cut-off task its own client stopped ends `complete` too
        if len(ok) != 1:
            lost.append(entry_id)  # Nomad never ran it to completion: the job was lost
        elif final != "complete":
            unknown_outcome.append(entry_id)  # it ran once, but the service could not learn how it ended
    left_running = [a["alloc_id"] for a in allocs if still_live(a)]
    if any(s == math.inf for s in stop_s):
        not_stopped = [s for s in stop_s if s == math.inf]
    refused = audit.get("faults", {})
    return {
        "acknowledged": len(acked_ids), "cancelled": len(cancelled_at),
        "completed_once": sum(1 for e in acked_ids - set(cancelled_at) if e not in lost),
        "lost": lost, "run_twice": ran_twice,
        "outcome_unknown": unknown_outcome,  # ran once; its job was garbage-collected while the service was down
        "reported": {s: sum(1 for e in entries if e["state"] == s) for s in TERMINAL},
        "double_bookings": device_overlaps(allocs) + int(audit.get("double_bookings_refused", 0))
        + int(audit.get("share_oversubscriptions", 0)),
        "left_running": left_running, "unknown_jobs": sorted(unknown_jobs),
        "cancel_stop_s_max": round(max(stop_s, default=0.0), 2), "cancels_never_stopped": len(not_stopped),
        "refused_requests_max_per_s": int(refused.get("refused_max_per_second", 0)),
        "refused_requests_worst_second": _worst_second(refused),
        "replies_lost": int(refused.get("replies_lost", 0)),
        "no_leader_refused": int(audit.get("elections", {}).get("refused", 0)),
        "placed_on_unhealthy": len(placed_while_unhealthy(audit)),
        "live_tenants_max": live_tenants_max(allocs), "lost_allocations": sum(1 for a in allocs if a.get("lost_at")),
        "gpu_idle_while_waiting_s_max": round(_idle_while_waiting(allocs, entries, audit), 2),
        "recovery_s": _recovery(faults, allocs, entries),
        "faults": {k: sum(1 for f in faults if f["kind"] == k) for k in ("kill", "lost_reply", "stream_cut", "outage",
                                                                         "election", "unhealthy_gpu", "partition")},
    }


def _idle_while_waiting(allocs: list[dict[str, Any]], entries: list[dict[str, Any]], audit: dict[str, Any]) -> float:
    """Longest stretch in which a whole GPU was free in Nomad while a one-GPU entry (which fits any)
    waited: from the entry's submission to its first allocation, cancelled entries excluded."""
    gpus = {d for a in allocs for d in a["device_ids"] if d.startswith("GPU-") and a.get("share_gpu") is None}
    if not gpus:
        return 0.0
    first_alloc: dict[str, float] = {}
    for a in allocs:
        m = _JOB_ID.match(a["job_id"])
        if m is not None:
            first_alloc[m["entry"]] = min(first_alloc.get(m["entry"], math.inf), a["created_at"])
    waits = [(e["submitted_at"], first_alloc.get(e["id"], e.get("finished_at") or e["submitted_at"]))
             for e in entries if (e["spec"].get("groups") or [{}])[0].get("gpu", {}) and
             ((e["spec"]["groups"][0].get("gpu") or {}).get("count") == 1) and e["state"] != "cancelled"]
    busy = [(a["created_at"], a["finished_at"] if a["finished_at"] is not None else math.inf, len(a["device_ids"]))
            for a in allocs if a.get("share_gpu") is None and any(d in gpus for d in a["device_ids"])]
    points = sorted({t for w in waits for t in w} | {t for b in busy for t in b[:2] if t != math.inf})
    longest = run_start = 0.0
    open_run = False
    for t0, t1 in zip(points, points[1:], strict=False):
        mid = (t0 + t1) / 2
        waiting = any(s <= mid < e for s, e in waits)
        used = sum(n for s, e, n in busy if s <= mid < e)
        if waiting and used < len(gpus):
            if not open_run:
                run_start, open_run = t0, True
            longest = max(longest, t1 - run_start)
        else:
            open_run = False
    return longest


def _recovery(faults: list[dict[str, Any]], allocs: list[dict[str, Any]],
              entries: list[dict[str, Any]]) -> dict[str, float]:
    """Per kind of fault, the longest time from its end to the next register Nomad received, counted
    only where an entry was waiting at that moment (else there was nothing to admit)."""
    registers = sorted(a["registered_at"] for a in allocs if a.get("registered_at") is not None)
    out: dict[str, float] = {}
    for f in faults:
        end = f["end"]
        waiting = any(e["submitted_at"] <= end and (e.get("admitted_at") or math.inf) > end for e in entries
                      if e["state"] != "cancelled")
        nxt = next((r for r in registers if r >= end), None)
        if waiting and nxt is not None:
            out[f["kind"]] = round(max(out.get(f["kind"], 0.0), nxt - end), 2)
    return out


def _worst_second(faults: dict[str, Any]) -> dict[str, int]:
    """The refused requests of the outage's busiest second, by method and path: who knocked."""
    by_second: dict[str, int] = faults.get("refused_by_second", {})
    if not by_second:
        return {}
    worst = max(by_second, key=lambda s: by_second[s])
    return dict(faults.get("refused_what_by_second", {}).get(worst, {}))
