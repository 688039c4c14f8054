"""`nomad-gpu status` with no ID, as a person reads it: the service's health and counts, one per line.

A script gets the same facts as JSON (`--json`, or whenever the output is not a terminal, as before).
"""

from __future__ import annotations

from nomad_gpu.api.payloads import Status, Unset


def service_rows(info: Status) -> list[tuple[str, str]]:
    """(label, value) rows: readiness, Nomad, the queue, the fleet, and GPU-equivalents in use by team."""
    nomad = "reachable" if info.nomad_reachable else "NOT REACHABLE (admissions paused)"
    if not isinstance(info.nomad_address, Unset) and info.nomad_address:
        nomad = f"{info.nomad_address} ({nomad})"
    rows = [
        ("ready", "yes" if info.ready else "no (waiting for the first reconcile with Nomad)"),
        ("nomad", nomad),
        ("event stream", info.event_stream or "-"),
        ("queued", str(info.queued)),
        ("admitted or running", str(info.live)),
        ("draining", str(info.draining)),
        ("nodes", str(info.nodes)),
        ("gpus", str(info.gpus)),
        ("cycles", str(info.cycles)),
    ]
    borrowed = info.team_borrowed_gpu if isinstance(info.team_borrowed_gpu, dict) else {}
    for team, used in sorted(info.team_usage_gpu.items()):
        lent = f" ({borrowed[team]:.2f} borrowed from its cohort)" if borrowed.get(team) else ""
        rows.append((f"in use by {team}", f"{used:.2f} GPU-eq{lent}"))
    if info.holds:
        rows.append(("head-of-line holds", ", ".join(f"{e} ({len(n)} nodes)" for e, n in sorted(info.holds.items()))))
    for p in info.preemptions:
        rows.append(("preempting", f"{', '.join(p.get('stopping') or []) or 'victims stopped'} on {p.get('node_name')} "
                                   f"for {p.get('preemptor')} ({p.get('why')})"))
    for entry, text in sorted(info.grace_warnings.items()):
        rows.append((f"warning {entry}", text))
    rows.append(("instance", info.instance or "-"))
    if info.epoch is not None:  # replicas on PostgreSQL: which one acts on Nomad (docs/reliability.md)
        rows.append(("role", f"{info.role} (epoch {info.epoch})"))
        rows.append(("leader", info.leader or "none right now (a takeover is under way)"))
    return rows
