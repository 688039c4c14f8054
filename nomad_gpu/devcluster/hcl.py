"""`POST /v1/jobs/parse` for the dev cluster: HCL2 jobspec text to Nomad's (uncanonicalized) Job JSON.

Nomad parses HCL with its own jobspec2 package; we cannot run it, so this maps the small subset of
stanzas our templates render (DESIGN.md 3.7) with python-hcl2, and refuses everything else with a
clear 400 `Failed to parse job: ...` (reference section 6), so a template that drifts beyond what the
dev cluster understands fails loudly instead of being half-understood.

python-hcl2's raw output is read through `hclbody.Body`. `${...}` inside a quoted string
(`"${node.unique.id}"`, `"${device.ids}"`) is kept verbatim, as Nomad keeps it for runtime
interpolation; any other expression is refused.
"""

from __future__ import annotations

import threading
from typing import Any

import hcl2
from hcl2.utils import SerializationOptions

from .hclbody import Body, HclError
from .hclcache import ShapeCache
from .hclservices import networks, services, templates

JSON = dict[str, Any]

_OPTIONS = SerializationOptions(with_comments=False, preserve_heredocs=False)
# python-hcl2 shares one lazily built grammar; parsing is quick but serialise it to be safe.
_PARSE_LOCK = threading.Lock()


def _loads(text: str) -> Any:
    return hcl2.loads(text, serialization_options=_OPTIONS)


_SHAPES = ShapeCache(_loads)


def parse_hcl_tree(text: str) -> Any:
    """python-hcl2's raw tree of any HCL text (an ACL policy: aclpolicy.py); HclError on a syntax error."""
    with _PARSE_LOCK:
        try:
            return _loads(text)
        except Exception as exc:  # lark raises a family of errors; all of them are syntax errors
            line, column = getattr(exc, "line", None), getattr(exc, "column", None)
            where = f"{line}:{column}: " if line is not None else ""
            raise HclError(f"{where}{str(exc).strip().splitlines()[0]}") from exc


def warm_up() -> None:
    """Build python-hcl2's grammar now (the first parse takes a while) rather than on a request."""
    parse_job_hcl('job "warm-up" {\n  group "g" {\n    task "t" {\n      driver = "exec"\n    }\n  }\n}\n')


def parse_job_hcl(text: str, *, max_run_duration: bool = True) -> JSON:
    """Parse one `job` block into Job JSON with Nomad's field names; unset fields are null.
    `max_run_duration`: whether the Nomad played has the group attribute (2.0.3 on, maxrun.py);
    without it the attribute is left unread, so `finish` refuses it as "Unsupported argument"
    (`api.TaskGroup` has no such hcl tag in v2.0.2)."""
    with _PARSE_LOCK:
        try:
            tree = _SHAPES.loads(text)
        except Exception as exc:  # lark raises a family of errors; all of them are syntax errors
            line, column = getattr(exc, "line", None), getattr(exc, "column", None)
            where = f"input.hcl:{line},{column}: " if line is not None else ""
            raise HclError(f"{where}{str(exc).strip().splitlines()[0]}") from exc
    top = Body(tree, "input.hcl")
    jobs = top.blocks("job", 1)
    top.finish()
    if len(jobs) != 1:
        raise HclError(f"input.hcl: exactly one job block is required, found {len(jobs)}")
    (job_id,), body = jobs[0]
    return _job(job_id, body, max_run_duration)


def _job(job_id: str, body: Body, max_run_duration: bool) -> JSON:
    groups = [_group(name, group, max_run_duration) for (name,), group in body.blocks("group", 1)]
    job = {
        "Region": body.string("region"),
        "Namespace": body.string("namespace"),
        "ID": job_id,
        "Name": job_id,
        "Type": body.string("type"),
        "Priority": body.integer("priority"),
        "AllAtOnce": None,
        "Datacenters": body.string_list("datacenters"),
        "NodePool": body.string("node_pool"),
        "Constraints": _constraints(body),
        "Affinities": None,
        "Spreads": None,
        "TaskGroups": groups,
        "Update": None,
        "Periodic": None,
        "ParameterizedJob": None,
        "Reschedule": None,
        "Meta": body.string_map("meta"),
        "Stop": None,
        "ParentID": None,
        "Dispatched": False,
        "Payload": None,
        "Status": None,
        "StatusDescription": None,
        "Version": None,
        "SubmitTime": None,
        "CreateIndex": None,
        "ModifyIndex": None,
        "JobModifyIndex": None,
    }
    body.finish()
    return job


def _group(name: str, body: Body, max_run_duration: bool) -> JSON:
    restart = body.single_block("restart")
    reschedule = body.single_block("reschedule")
    group = {
        "Name": name,
        "Count": body.integer("count"),
        "Constraints": _constraints(body),
        "Affinities": None,
        "Spreads": None,
        "Tasks": [_task(task_name, task) for (task_name,), task in body.blocks("task", 1)],
        "RestartPolicy": None if restart is None else {
            "Interval": restart.duration("interval"),
            "Attempts": restart.integer("attempts"),
            "Delay": restart.duration("delay"),
            "Mode": restart.string("mode"),
            "RenderTemplates": None,
        },
        "ReschedulePolicy": None if reschedule is None else {
            "Attempts": reschedule.integer("attempts"),
            "Interval": None,
            "Delay": None,
            "DelayFunction": None,
            "MaxDelay": None,
            "Unlimited": reschedule.boolean("unlimited"),
        },
        "EphemeralDisk": None,
        "Networks": networks(body),
        "Meta": body.string_map("meta"),
        "Services": services(body),
        "Volumes": _volumes(body),
    }
    if max_run_duration:
        group["MaxRunDuration"] = body.duration("max_run_duration")
    for block in (restart, reschedule):
        if block is not None:
            block.finish()
    body.finish()
    return group


def _task(name: str, body: Body) -> JSON:
    resources = body.single_block("resources")
    config = body.single_block("config")
    task = {
        "Name": name,
        "Driver": body.string("driver"),
        "User": None,
        "Config": None if config is None else config.passthrough(),
        "Constraints": None,
        "Affinities": None,
        "Env": body.string_map("env"),
        "Services": services(body),
        "Resources": None if resources is None else _resources(resources),
        "RestartPolicy": None,
        "Meta": body.string_map("meta"),
        "KillTimeout": body.duration("kill_timeout"),
        "LogConfig": None,
        "Artifacts": None,
        "Templates": templates(body),
        "Leader": False,
        "KillSignal": body.string("kill_signal") or "",  # `api/tasks.go` Task.KillSignal, v2.0.5
        "Kind": "",
        "VolumeMounts": _volume_mounts(body),
    }
    body.finish()
    return task


def _volumes(body: Body) -> JSON | None:
    """Group `volume "<name>"` blocks as `TaskGroup.Volumes` (`api/tasks.go` VolumeRequest, v2.0.5)."""
    volumes: dict[str, Any] = {}
    for (name,), block in body.blocks("volume", 1):
        volumes[name] = {"Name": name, "Type": block.string("type"), "Source": block.string("source"),
                         "ReadOnly": bool(block.boolean("read_only")), "PerAlloc": False, "MountOptions": None,
                         "AccessMode": "", "AttachmentMode": ""}
        block.finish()
    return volumes or None


def _volume_mounts(body: Body) -> list[JSON] | None:
    """Task `volume_mount` blocks as `Task.VolumeMounts` (`api/tasks.go` VolumeMount, v2.0.5)."""
    mounts = []
    for _, block in body.blocks("volume_mount", 0):
        mounts.append({"Volume": block.string("volume"), "Destination": block.string("destination"),
                       "ReadOnly": bool(block.boolean("read_only")), "PropagationMode": "private"})
        block.finish()
    return mounts or None


def _resources(body: Body) -> JSON:
    devices = []
    for (device_name,), device in body.blocks("device", 1):
        devices.append({
            "Name": device_name,
            "Count": device.integer("count"),
            "Constraints": _constraints(device),
            "Affinities": _affinities(device),
        })
        device.finish()
    resources = {
        "CPU": body.integer("cpu"),
        "Cores": None,
        "MemoryMB": body.integer("memory"),
        "MemoryMaxMB": body.integer("memory_max"),
        "DiskMB": None,
        "Networks": None,
        "Devices": devices or None,
    }
    body.finish()
    return resources


def _constraints(body: Body) -> list[JSON] | None:
    out = []
    for _, block in body.blocks("constraint", 0):
        out.append({
            "LTarget": block.string("attribute") or "",
            "RTarget": block.string("value") or "",
            "Operand": block.string("operator") or "=",
        })
        block.finish()
    return out or None


def _affinities(body: Body) -> list[JSON] | None:
    out = []
    for _, block in body.blocks("affinity", 0):
        weight = block.integer("weight")
        out.append({
            "LTarget": block.string("attribute") or "",
            "RTarget": block.string("value") or "",
            "Operand": block.string("operator") or "=",
            "Weight": 50 if weight is None else weight,
        })
        block.finish()
    return out or None


__all__ = ["HclError", "parse_job_hcl", "warm_up"]
