"""A task group's `disconnect` block: what Nomad does when the group's node stops heartbeating.

The block (`DisconnectStrategy`, api/tasks.go and nomad/structs/group.go, v2.0.5 and v1.10.5) has four
settings: `lost_after` (how long the servers call a silent node's allocations `unknown` before `lost`),
`stop_on_client_after` (how long the client keeps running them without a good heartbeat), `replace`
(whether the servers place a replacement meanwhile; true by default) and `reconcile` (which copy is kept
on reconnect; `best_score` by default). Nomad refuses `lost_after` and `stop_on_client_after` together,
and `stop_on_client_after` on system jobs (`DisconnectStrategy.Validate`). partitions.py plays them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .hclbody import Body

JSON = dict[str, Any]
_SECOND = 10**9
RECONCILE_OPTIONS = ("keep_original", "keep_replacement", "best_score", "longest_running")
DEFAULT_KILL_TIMEOUT_S = 5.0  # `DefaultKillTimeout`, nomad/structs/structs.go


def from_hcl(block: Body | None) -> JSON | None:
    """The `disconnect` block as the parse endpoint's JSON (api/tasks.go field names)."""
    if block is None:
        return None
    out = {"LostAfter": block.duration("lost_after"), "StopOnClientAfter": block.duration("stop_on_client_after"),
           "Replace": block.boolean("replace"), "Reconcile": block.string("reconcile")}
    block.finish()
    return out


def canonicalize(group: JSON) -> None:
    """`DisconnectStrategy.Canonicalize` (api/tasks.go): `replace` true, `reconcile` best_score."""
    block = group.get("Disconnect")
    if not isinstance(block, dict):
        group["Disconnect"] = None
        return
    if block.get("Replace") is None:
        block["Replace"] = True
    if not block.get("Reconcile"):
        block["Reconcile"] = "best_score"


def validate(job_type: str, group: JSON, prefix: str) -> list[str]:
    """`DisconnectStrategy.Validate` (nomad/structs/group.go, v2.0.5 and v1.10.5), with its texts."""
    block = group.get("Disconnect")
    if not isinstance(block, dict):
        return []
    errors = []
    stop, lost = block.get("StopOnClientAfter"), int(block.get("LostAfter") or 0)
    if stop is not None:
        if int(stop) < 0:
            errors.append("stop_after cannot be a negative duration")
        if job_type not in ("service", "batch"):
            errors.append("stop_after can only be used with service or batch job types")
    if lost < 0:
        errors.append("lost_after cannot be a negative duration")
    if stop is not None and lost != 0:
        errors.append("Disconnect cannot be configured with both lost_after and stop_after")
    if block.get("Reconcile") not in RECONCILE_OPTIONS:
        errors.append("reconcile option is invalid")
    return [f"{prefix}: {error}" for error in errors]


def _block(job: JSON, group_name: str) -> JSON:
    group = next((g for g in job.get("TaskGroups") or [] if g.get("Name") == group_name), None)
    block = (group or {}).get("Disconnect")
    return block if isinstance(block, dict) else {}


def stop_on_client_after_s(job: JSON, group: str) -> float | None:
    """`TaskGroup.GetDisconnectStopTimeout` in seconds; None when unset."""
    stop = _block(job, group).get("StopOnClientAfter")
    return None if stop is None else int(stop) / _SECOND


def lost_after_s(job: JSON, group: str) -> float:
    """`TaskGroup.GetDisconnectLostAfter` in seconds; 0 when unset (the allocation is lost at once)."""
    return int(_block(job, group).get("LostAfter") or 0) / _SECOND


def replaces(job: JSON, group: str) -> bool:
    """`TaskGroup.Replace`: true unless the block says `replace = false`."""
    return _block(job, group).get("Replace") is not False


def wait_client_stop_s(job: JSON, group: str) -> float:
    """`Allocation.WaitClientStop` (nomad/structs/alloc.go): a lost allocation's replacement waits for
    stop_on_client_after plus the longest task kill_timeout (5 s at least, and not capped by the client's
    max_kill_timeout) after the loss; 0 without stop_on_client_after."""
    stop = stop_on_client_after_s(job, group)
    if stop is None:
        return 0.0
    tasks = next((g.get("Tasks") or [] for g in job.get("TaskGroups") or [] if g.get("Name") == group), [])
    kill = max([DEFAULT_KILL_TIMEOUT_S] + [int(t.get("KillTimeout") or 0) / _SECOND for t in tasks])
    return stop + kill
