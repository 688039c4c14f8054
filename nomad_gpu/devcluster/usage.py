"""`GET /v1/client/allocation/:alloc_id/stats`: an allocation's resource usage, as a Nomad client answers.

The service reads it to show GPU utilisation per running entry and to count idle GPUs, so the dev
cluster serves the same shape, with the utilisation a job asks for in its meta (the spec's
`dev: {gpu_util: N}`, rendered as `nomad_gpu_dev_gpu_util`; 100 when unset) standing in for NVML. A
timeline (`dev: {gpu_util: [[0, 80], [600, 0]]}`, rendered `0:80,600:0`) changes it over the task's life in
dev-cluster time (seconds since the allocation started, times `--speed`): 100 before its first step.

Modelled on Nomad v2.0.5:
- the route and its errors (`command/agent/alloc_endpoint.go` allocStats): an allocation the cluster
  does not know is a 404 whose body is the RPC error `Unknown allocation "<id>"`
  (`nomad/structs/errors.go` NewErrUnknownAllocation); `?task=` limits it to one task;
- the body (`client/allocrunner/alloc_runner.go` LatestAllocStats, `client/structs/structs.go`
  AllocResourceUsage): `Tasks` by name, and `ResourceUsage` summed over the tasks that are running
  only, with `DeviceStats` appended task by task; an allocation that is not running has empty sums
  and no tasks (its tasks have reported nothing yet, or no longer run);
- device stats (`client/devicemanager/instance.go` DeviceStats, `plugins/shared/structs/stats.go`):
  per allocated device group, `InstanceStats` keyed by the allocated IDs only; `StatValue` keys left
  unset are omitted (`omitempty`). The stock NVIDIA plugin reports no stats for MIG devices
  (nomad-device-nvidia `stats.go`); the project's plugin reports their memory in use, and for share
  instances the whole GPU's figures (nomad_gpu/plugin/wire.py).
"""

from __future__ import annotations

import time
from typing import Any

from .allocs import Alloc, ClientStatus
from .inventory import DeviceGroup
from .records import NotFound
from .state import ClusterState

JSON = dict[str, Any]
META_GPU_UTIL = "nomad_gpu_dev_gpu_util"
DEFAULT_GPU_UTIL = 100.0
CPU_PCT = 50.0
"""A running task's CPU figure (a placeholder: the service reads only devices); memory is its ask."""


def alloc_stats(state: ClusterState, alloc_id: str, task: str = "") -> JSON:
    with state.lock:
        alloc = state.allocs.get(alloc_id)
        if alloc is None:
            raise NotFound(f'Unknown allocation "{alloc_id}"')
        node = state.nodes.get(alloc.node_id)
        plugin = node.device_plugin if node is not None else "nvidia"
        now = state.clock()
        running = alloc.client_status is ClientStatus.RUNNING
        util = _gpu_util(alloc, _ran_s(alloc, now, state.speed))
        devices_all: list[JSON] = []
        tasks: JSON = {}
        memory_mb, cpu_pct, stamp = 0, 0.0, 0
        if running:
            stamp = int(now * 1e9)
            for ask in alloc.tasks:
                if task and ask.name != task:
                    continue
                devices = [_group_stats(c.group, c.ids, util, plugin, now) for c in alloc.devices if c.task == ask.name]
                mine: JSON = {"MemoryStats": _memory(ask.memory_mb), "CpuStats": _cpu(CPU_PCT),
                              "DeviceStats": [d for d in devices if d is not None]}
                tasks[ask.name] = {"ResourceUsage": mine, "Timestamp": stamp, "Pids": None}
                memory_mb, cpu_pct = memory_mb + ask.memory_mb, cpu_pct + CPU_PCT
                devices_all.extend(mine["DeviceStats"])
        usage = {"MemoryStats": _memory(memory_mb), "CpuStats": _cpu(cpu_pct), "DeviceStats": devices_all}
        return {"ResourceUsage": usage, "Tasks": tasks, "Timestamp": stamp}


def _gpu_util(alloc: Alloc, ran_s: float) -> float:
    """The job's (or its group's) `nomad_gpu_dev_gpu_util` meta, 0..100, at `ran_s` into the task's life;
    unset or unreadable: 100."""
    meta = dict(alloc.job.get("Meta") or {})
    for group in alloc.job.get("TaskGroups") or []:
        if group.get("Name") == alloc.task_group:
            meta.update(group.get("Meta") or {})
    text = str(meta.get(META_GPU_UTIL, DEFAULT_GPU_UTIL))
    try:
        steps = [(float(at), float(pct)) for at, _, pct in (step.partition(":") for step in text.split(","))] \
            if ":" in text else [(0.0, float(text))]
    except ValueError:
        return DEFAULT_GPU_UTIL
    value = DEFAULT_GPU_UTIL
    for at, pct in steps:  # the last step started by now holds
        if at <= ran_s:
            value = pct
    return min(max(value, 0.0), 100.0) if value == value else DEFAULT_GPU_UTIL


def _ran_s(alloc: Alloc, now: float, speed: float) -> float:
    """Dev-cluster seconds since the allocation's task started (the clock is wall time; tasks run `speed`
    times faster)."""
    return 0.0 if alloc.started_at is None else max(now - alloc.started_at, 0.0) * speed


def _group_stats(group: DeviceGroup, ids: tuple[str, ...], util: float, plugin: str, now: float) -> JSON | None:
    mig = " MIG " in group.name
    if mig and plugin != "nomad-gpu":
        return None  # the stock plugin skips MIG devices
    used = round(group.memory_mib * util / 100.0)
    memory = {"IntNumeratorVal": used, "IntDenominatorVal": group.memory_mib, "Unit": "MiB", "Desc": "Memory in use"}
    attributes: JSON = {"Memory state": memory}
    summary = memory
    if not mig:
        summary = {"IntNumeratorVal": round(util), "Unit": "%", "Desc": "GPU utilization"}
        attributes["GPU utilization"] = summary
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e9):09d}Z"
    return {"Vendor": group.vendor, "Type": group.type, "Name": group.name,
            "InstanceStats": {i: {"Summary": summary, "Stats": {"Nested": None, "Attributes": attributes},
                                  "Timestamp": stamp} for i in ids}}


def _memory(mb: int) -> JSON:
    rss = mb * 1024 * 1024
    return {"RSS": rss, "Cache": 0, "Swap": 0, "Usage": rss, "MaxUsage": rss, "KernelUsage": 0, "KernelMaxUsage": 0,
            "Measured": ["RSS", "Cache", "Swap", "Usage", "Max Usage"]}


def _cpu(percent: float) -> JSON:
    return {"SystemMode": 0.0, "UserMode": percent, "TotalTicks": percent, "ThrottledPeriods": 0,
            "ThrottledTime": 0, "Percent": percent, "Measured": ["System Mode", "User Mode", "Percent"]}
