"""MIG layouts in the dev cluster: placements of the cluster file's instances, and re-layouts run as jobs.

Nomad knows nothing of MIG layouts; a node's layout changes when something on the node changes it
and the device plugin fingerprints the result. The dev cluster models both halves, strictly:

- the cluster file's `mig:` list gets placements by a fixed rule (largest profile first, lowest start
  first, backtracking; `profile@start` items stay where they say), and a list with no valid
  arrangement is refused. Placements follow the 7-slice family's table (reference/nvml-mig.md 3.2),
  written here again on purpose: the dev cluster shares no code with the core it judges;
- a task whose command is `nomad-gpu node mig apply --gpu G --layout L --expect-idle I` changes the
  node's layout when it exits, as the command would through NVML: it refuses (exit 3) when an instance
  it must destroy is not in I or is held by a running allocation (NVML's IN_USE: a running task has
  processes), and it destroys an instance held by an allocation that has not started yet, because
  NVML sees no process there: that is counted in the audit's `mig_destroyed_in_use`, which a correct
  service keeps at 0;
- Nomad sees the new instances only after the device plugin fingerprints them (our plugin's period,
  10 s by default; the stock plugin's a minute) and the client re-registers the node, which it does
  `nodeUpdateRetryIntv` (5 s) plus a random stagger of up to as much again after the change
  (`watchNodeUpdates` and `retryIntv`, client/client.go; `updateNodeFromDevices`, client/node_updater.go,
  v2.0.5). The dev cluster waits the worst case of that, or the node's `mig_fingerprint_delay_s`,
  then serves the new devices and emits `NodeRegistration` (nomad/state/events.go, v2.0.5).
"""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .migprofiles import mig_memory_slices

# (compute slices, memory slices) -> valid starts; section 3.2 of reference/nvml-mig.md.
_STARTS = {(1, 1): (0, 1, 2, 3, 4, 5, 6), (1, 2): (0, 2, 4, 6), (2, 2): (0, 2, 4), (3, 4): (0, 4), (4, 4): (0,),
           (7, 8): (0,)}
_MAX = {(1, 1): 7, (1, 2): 4, (2, 2): 3, (3, 4): 2, (4, 4): 1, (7, 8): 1}
_ITEM = re.compile(r"^(?P<g>[1-7])g\.(?P<gb>\d+)gb(?P<me>\+me)?(?:@(?P<start>\d))?$")
_NS = uuid.UUID("0b6a4f8e-5f7d-4c1e-9a43-2e7c5d9b1f60")

PLUGIN_PERIOD_S = {"nomad-gpu": 10.0, "nvidia": 60.0}
"""Device plugin fingerprint periods: ours (plugin/config.py) and nomad-device-nvidia's default."""
NODE_UPDATE_WORST_S = 10.0
"""`nodeUpdateRetryIntv` (5 s) + `helper.RandomStagger` of up to 5 s (client/client.go, v2.0.5)."""


@dataclass(frozen=True)
class Instance:
    id: str
    profile: str
    start: int
    size: int

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}"


@dataclass
class MigGpu:
    """One MIG-mode GPU of a dev-cluster node, with its instances as NVML has them now."""

    uuid: str
    model: str
    memory_mib: int
    bus: str
    instances: list[Instance] = field(default_factory=list)

    def layout(self) -> list[str]:
        return [str(i) for i in sorted(self.instances, key=lambda i: i.start)]


def memory_slices(profile: str, parent_memory_mib: int) -> int:
    """Memory slices of a profile: 1g with twice a slice's memory takes two (1g.20gb on 80 GB)."""
    if _ITEM.match(profile) is None or "@" in profile:
        raise ValueError(f"MIG profile {profile!r} is not of the form '<g>g.<GB>gb', e.g. '3g.40gb'")
    return mig_memory_slices(profile, parent_memory_mib)


def arrange(items: Sequence[str], parent_memory_mib: int) -> list[tuple[str, int, int]] | None:
    """(profile, start, size) for every item, in the items' order, or None when no valid arrangement exists.

    `profile@start` items are placed where they say; the rest by depth-first search, largest profile
    first and lowest start first, so `3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb` gives 3g@4, 2g@0, 1g@2, 1g@3.
    ValueError for an item that is no profile, or a start the profile never takes.
    """
    out: list[tuple[str, int, int] | None] = [None] * len(items)
    free: list[tuple[int, str, int, int]] = []  # (item index, profile, compute, size)
    counts: dict[tuple[int, int], int] = {}
    taken = [False] * 8
    for k, item in enumerate(items):
        m = _ITEM.match(item.strip())
        if m is None:
            raise ValueError(f"MIG item {item!r} is not '<g>g.<GB>gb' or '<g>g.<GB>gb@<start>'")
        profile = item.strip().split("@")[0]
        compute, size = int(m["g"]), memory_slices(profile, parent_memory_mib)
        if (compute, size) not in _STARTS:
            raise ValueError(f"MIG profile {profile!r}: there is no {compute}g profile of {size} memory slices")
        counts[(compute, size)] = counts.get((compute, size), 0) + 1
        if m["start"] is None:
            free.append((k, profile, compute, size))
            continue
        start = int(m["start"])
        if start not in _STARTS[(compute, size)]:
            raise ValueError(f"MIG item {item!r}: {profile} may start only at "
                             f"{', '.join(map(str, _STARTS[(compute, size)]))}")
        if any(taken[start:start + size]):
            return None
        taken[start:start + size] = [True] * size
        out[k] = (profile, start, size)
    if any(n > _MAX[key] for key, n in counts.items()):
        return None
    free.sort(key=lambda f: (-f[3], -f[2], f[1], f[0]))
    found = next(_search(free, taken, []), None)
    if found is None:
        return None
    for (k, profile, _, size), start in zip(free, found, strict=True):
        out[k] = (profile, start, size)
    return [p for p in out if p is not None]


def _search(free: list[tuple[int, str, int, int]], taken: list[bool], chosen: list[int]) -> Iterator[list[int]]:
    """Starts for `free` in its order (depth first, lowest start first)."""
    if len(chosen) == len(free):
        yield list(chosen)
        return
    _, _, compute, size = free[len(chosen)]
    for start in _STARTS[(compute, size)]:
        if start + size > 8 or any(taken[start:start + size]):
            continue
        taken[start:start + size] = [True] * size
        chosen.append(start)
        yield from _search(free, taken, chosen)
        chosen.pop()
        taken[start:start + size] = [False] * size


@dataclass(frozen=True)
class ApplyCommand:
    gpu: str
    layout: tuple[str, ...]
    expect_idle: frozenset[str]
    dry_run: bool


def apply_command(task: dict[str, Any]) -> ApplyCommand | None:
    """The `node mig apply` a task runs (`Config.command` + `Config.args`, as raw_exec and exec take
    them), or None for any other task."""
    config = task.get("Config") or {}
    command = str(config.get("command") or "")
    args = [str(a) for a in config.get("args") or []]
    words = shlex.split(command) + args if " " in command else [command, *args]
    if not words or not words[0].endswith("nomad-gpu") or words[1:4] != ["node", "mig", "apply"]:
        return None
    opts: dict[str, str] = {}
    rest = words[4:]
    dry = "--dry-run" in rest
    rest = [w for w in rest if w != "--dry-run"]
    for k in range(0, len(rest) - 1, 2):
        opts[rest[k]] = rest[k + 1]
    return ApplyCommand(opts.get("--gpu", ""), tuple(filter(None, opts.get("--layout", "").split(","))),
                        frozenset(filter(None, opts.get("--expect-idle", "").split(","))), dry)


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    message: str
    before: list[str]
    after: list[str]
    destroyed_in_use: int = 0


def apply(gpu: MigGpu, cmd: ApplyCommand, holders: dict[str, bool], new_id: Any) -> Outcome:
    """Change `gpu` as `nomad-gpu node mig apply` would. `holders`: instance ID -> whether the live
    allocation holding it is running (has processes). `new_id()` gives a fresh MIG UUID."""
    before = gpu.layout()
    try:
        target = arrange(list(cmd.layout), gpu.memory_mib)
    except ValueError as exc:
        return Outcome(2, str(exc), before, before)
    if target is None or any("@" not in item for item in cmd.layout):
        return Outcome(2, f"invalid layout {','.join(cmd.layout)}", before, before)
    wanted = {(p, s, n) for p, s, n in target}
    destroy = [i for i in gpu.instances if (i.profile, i.start, i.size) not in wanted]
    if any(i.id not in cmd.expect_idle for i in destroy):
        return Outcome(3, "an instance to destroy is not in --expect-idle", before, before)
    if any(holders.get(i.id) for i in destroy):
        return Outcome(3, "an instance to destroy has processes", before, before)
    if cmd.dry_run:
        return Outcome(0, "dry run", before, before)
    in_use = sum(1 for i in destroy if i.id in holders)
    keep = [i for i in gpu.instances if i not in destroy]
    have = {(i.profile, i.start, i.size) for i in keep}
    made = [Instance(new_id(), p, s, n) for p, s, n in sorted(target, key=lambda t: (-t[2], t[1]))
            if (p, s, n) not in have]
    gpu.instances = sorted(keep + made, key=lambda i: i.start)
    return Outcome(0, "", before, gpu.layout(), in_use)


def fresh_id(node_id: str, gpu: str, serial: int) -> str:
    return "MIG-" + str(uuid.uuid5(_NS, f"{node_id}/{gpu}/relayout/{serial}"))
