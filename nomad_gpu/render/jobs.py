"""Render a job spec and its placement into the HCL2 jobspec nomad-gpu registers.

DESIGN 3.7: templates are the single source of a jobspec. This module turns a
validated :class:`JobSpec` plus the placement the scheduler chose into the plain
context a template sees (no pydantic objects, nothing computed in Jinja), picks the
template by name from a templates directory (a constructor parameter, defaulting to
the bundled ``templates/``, see :mod:`nomad_gpu.bundled`), and renders it in the escaping environment of
:mod:`nomad_gpu.render.hcl`. The HCL that comes out pins the node and the exact
device IDs, turns off Nomad's own restarts and reschedules (nomad-gpu re-queues),
and carries the meta that ties the Nomad job back to its queue entry.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from nomad_gpu.bundled import templates_dir as bundled_templates_dir
from nomad_gpu.render.checkpoint import CheckpointSpec
from nomad_gpu.render.devices import (
    META_SHARE_GPU,
    META_SHARE_MILLI,
    GroupContext,
    adapter_for,
)
from nomad_gpu.render.devspec import gpu_util_meta
from nomad_gpu.render.groupspec import GroupSpec
from nomad_gpu.render.hcl import RenderError, hcl_ident, make_environment
from nomad_gpu.render.jobjson import job_json
from nomad_gpu.render.network import network_context, service_context
from nomad_gpu.render.placement import RenderPlacement, check_placement
from nomad_gpu.render.servicejob import ServiceJobSettings, service_job_context
from nomad_gpu.render.spec import JobSpec, SweepSpec

__all__ = [
    "DEFAULT_TEMPLATES_DIR",
    "META_DEV_DURATION",
    "META_DEV_EXIT",
    "META_DEV_EXIT_ON_SIGNAL",
    "META_DEV_GPU_UTIL",
    "META_ENTRY",
    "META_NAME",
    "META_SHARE_GPU",
    "META_SHARE_MILLI",
    "META_TEAM",
    "SERVICE_TEMPLATE",
    "JobRenderer",
    "ServiceJobSettings",
    "build_job_context",
    "render_job",
    "render_service_job",
]

DEFAULT_TEMPLATES_DIR = bundled_templates_dir()
"""The bundled ``templates/`` (in a checkout, the wheel or an editable install alike); pass another
directory to :class:`JobRenderer` to override."""
SERVICE_TEMPLATE = "nomad-gpu"
"""The template of nomad-gpu's own Nomad job; not selectable by a job spec."""

META_ENTRY = "nomad_gpu_entry"
"""Job meta the caller sets (via ``extra_meta``): the queue entry the job belongs to."""
META_NAME = "nomad_gpu_name"
"""Job meta: the spec's name (a trial's ``<sweep>-t<idx>``)."""
META_TEAM = "nomad_gpu_team"
"""Job meta: the team (fair-share / quota account) the job is charged to."""
META_DEV_DURATION = "nomad_gpu_dev_duration_s"
"""Job meta for the embedded dev cluster: how long the tasks "run", in seconds."""
META_DEV_EXIT = "nomad_gpu_dev_exit"
"""Job meta for the embedded dev cluster: ``fail`` makes the tasks fail at the end."""
META_DEV_GPU_UTIL = "nomad_gpu_dev_gpu_util"
"""Job meta for the embedded dev cluster: the GPU utilisation (%) its devices report."""
META_DEV_EXIT_ON_SIGNAL = "nomad_gpu_dev_exit_on_signal_after_s"
"""Job meta for the embedded dev cluster: its tasks exit 0 this many seconds after the kill signal."""

_NO_META: Mapping[str, str] = types.MappingProxyType({})


class JobRenderer:
    """Renders job templates from one directory (``<name>.hcl.j2``; ``_*`` are partials)."""

    def __init__(self, templates_dir: Path = DEFAULT_TEMPLATES_DIR) -> None:
        self.templates_dir = Path(templates_dir)
        self.bundled = self.templates_dir.resolve() == DEFAULT_TEMPLATES_DIR.resolve()
        """Whether the templates are the bundled ones, whose Job JSON jobjson.py builds (proven by test)."""
        self._env = make_environment(self.templates_dir)
        # Each template is read and compiled once per renderer: checking every file's mtime on every
        # render (Jinja's default) cost a few stat calls per job; a changed template takes a restart.
        self._env.auto_reload = False

    def template_names(self) -> list[str]:
        """Templates a job spec may select by name (partials and the service excluded)."""
        names = (path.name.removesuffix(".hcl.j2") for path in self.templates_dir.glob("*.hcl.j2"))
        return sorted(name for name in names if not name.startswith("_") and name != SERVICE_TEMPLATE)

    def render_template(self, name: str, context: Mapping[str, Any]) -> str:
        """Render ``templates/<name>.hcl.j2`` with ``context``; any failure is a RenderError."""
        try:
            template = self._env.get_template(f"{name}.hcl.j2")
            return template.render(dict(context))
        except jinja2.TemplateNotFound as exc:
            available = ", ".join(self.template_names()) or "none"
            raise RenderError(f"unknown template {exc.name!r} (available: {available})") from exc
        except jinja2.TemplateSyntaxError as exc:
            raise RenderError(f"template {exc.name or name!r} line {exc.lineno}: {exc.message}") from exc
        except jinja2.UndefinedError as exc:
            raise RenderError(f"template {name!r}: {exc.message}") from exc
        except RenderError as exc:
            raise RenderError(f"template {name!r}: {exc}") from exc

    def render_job(
        self,
        spec: JobSpec,
        *,
        job_id: str,
        placement: RenderPlacement,
        extra_meta: Mapping[str, str] = _NO_META,
        max_run_duration: bool = False,
        stop_on_client_after: float | None = None,
    ) -> str:
        """The HCL2 jobspec of ``spec`` pinned to ``placement``, from ``spec.template``.
        ``max_run_duration``: every Nomad agent has the group field (2.0.3 and later), so a batch
        template also hands ``max_runtime`` to Nomad's client; the service's timer stays either way.
        ``stop_on_client_after``: seconds; each group holding a device gets `disconnect {
        stop_on_client_after, replace = false }` (None: no block)."""
        context = self._job_context(spec, job_id, placement, extra_meta, max_run_duration, stop_on_client_after)
        return self.render_template(spec.template, context)

    def render_job_json(
        self,
        spec: JobSpec,
        *,
        job_id: str,
        placement: RenderPlacement,
        extra_meta: Mapping[str, str] = _NO_META,
        max_run_duration: bool = False,
        max_run_duration_field: bool = False,
        stop_on_client_after: float | None = None,
    ) -> tuple[str, dict[str, Any] | None]:
        """The HCL of :meth:`render_job` and, from the same context, the Job JSON Nomad's parse returns
        for it: None unless the template is a bundled one whose JSON is proven (render/jobjson.py).
        ``max_run_duration_field``: the Nomad that registers it has the group field (2.0.3 on)."""
        context = self._job_context(spec, job_id, placement, extra_meta, max_run_duration, stop_on_client_after)
        hcl = self.render_template(spec.template, context)
        if not self.bundled:
            return hcl, None
        return hcl, job_json(spec.template, context, max_run_duration_field=max_run_duration_field)

    def _job_context(self, spec: JobSpec, job_id: str, placement: RenderPlacement, extra_meta: Mapping[str, str],
                     max_run_duration: bool, stop_on_client_after: float | None = None) -> dict[str, Any]:
        if isinstance(spec, SweepSpec):
            raise RenderError("a sweep renders one job per trial: expand it with expand_sweep() first")
        if spec.template == SERVICE_TEMPLATE or spec.template.startswith("_"):
            raise RenderError(f"template {spec.template!r} is not a job template")
        return build_job_context(spec, job_id=job_id, placement=placement, extra_meta=extra_meta,
                                 max_run_duration=max_run_duration, stop_on_client_after=stop_on_client_after)

    def render_service_job(self, settings: ServiceJobSettings) -> str:
        """The Nomad job that runs nomad-gpu itself (``templates/nomad-gpu.hcl.j2``)."""
        _check_job_id(settings.job_id)
        return self.render_template(SERVICE_TEMPLATE, {"service": service_job_context(settings)})


def build_job_context(
    spec: JobSpec,
    *,
    job_id: str,
    placement: RenderPlacement,
    extra_meta: Mapping[str, str] = _NO_META,
    max_run_duration: bool = False,
    stop_on_client_after: float | None = None,
) -> dict[str, Any]:
    """The plain dict a job template sees: ``job`` and ``groups`` (see templates/batch.hcl.j2).
    ``job.max_run_duration`` is ``max_runtime`` as a duration when Nomad has the field, else None;
    only templates of batch jobs write it (Nomad refuses it on other job types).
    ``job.stop_on_client_after`` is the operator's setting as a duration, or None (no disconnect block)."""
    if stop_on_client_after is not None and not stop_on_client_after >= 0:
        raise RenderError(f"stop_on_client_after must be a duration >= 0, got {stop_on_client_after!r}")
    _check_job_id(job_id)
    check_placement(spec, placement)
    meta: dict[str, str] = dict(spec.meta)
    meta[META_NAME] = spec.name
    meta[META_TEAM] = spec.team
    if spec.dev is not None:
        meta[META_DEV_DURATION] = _seconds(spec.dev.duration_s)
        if spec.dev.fail:
            meta[META_DEV_EXIT] = "fail"
        if spec.dev.gpu_util is not None:
            meta[META_DEV_GPU_UTIL] = gpu_util_meta(spec.dev.gpu_util)
        if spec.dev.exit_on_signal_after_s is not None:
            meta[META_DEV_EXIT_ON_SIGNAL] = _seconds(spec.dev.exit_on_signal_after_s)
    for key, value in extra_meta.items():
        hcl_ident(key)
        if not isinstance(value, str):
            raise RenderError(f"extra meta {key!r} must be a string, got {type(value).__name__}")
        meta[key] = value  # the caller's keys are applied last and win
    return {
        "job": {
            "id": job_id,
            "priority": spec.priority,
            "datacenters": list(spec.datacenters),
            "namespace": spec.namespace,
            "node_pool": spec.node_pool or placement.node_pool,
            "node_id": placement.node_id,
            "meta": meta,
            "max_run_duration": (f"{_seconds(spec.max_runtime)}s"
                                 if max_run_duration and spec.max_runtime is not None else None),
            "stop_on_client_after": (None if stop_on_client_after is None else f"{_seconds(stop_on_client_after)}s"),
        },
        "groups": [_group_context(group, placement, spec.checkpoint) for group in spec.groups],
    }


def _group_context(group: GroupSpec, placement: RenderPlacement,
                   checkpoint: CheckpointSpec | None = None) -> dict[str, Any]:
    placed = placement.for_group(group.name)
    task = group.task
    config: dict[str, Any] = {}
    if task.image is not None:
        config["image"] = task.image
    if task.command is not None:
        config["command"] = task.command
    if task.args:
        config["args"] = list(task.args)
    if group.ports and task.driver == "docker":
        config["ports"] = sorted(group.ports)  # docker publishes only the group ports its config names
    ctx = GroupContext(task.driver, dict(task.env), config)
    adapter_for(group, placed).render(group, placed, ctx)
    env, meta, device = ctx.env, ctx.meta, ctx.device
    return {
        "name": group.name,
        "count": group.count,
        "meta": meta,
        "task": {"name": group.name, "driver": task.driver, "config": config, "env": env,
                 # a checkpoint grace is Nomad's kill_signal and kill_timeout (render/checkpoint.py)
                 "kill_signal": checkpoint.signal if checkpoint is not None else None,
                 "kill_timeout": f"{_seconds(checkpoint.grace)}s" if checkpoint is not None else None},
        "resources": {
            "cpu": group.resources.cpu,
            "memory": group.resources.memory,
            "memory_max": group.resources.memory_max,
        },
        "device": device,
        "network": network_context(group.ports),
        "service": service_context(group.service),
    }


def _check_job_id(job_id: str) -> None:
    if not job_id or len(job_id) > 128 or any(c.isspace() or not c.isprintable() for c in job_id):
        raise RenderError(f"invalid Nomad job id {job_id!r} (1-128 printable characters, no spaces)")


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


@functools.lru_cache(maxsize=8)
def _renderer(templates_dir: Path) -> JobRenderer:
    return JobRenderer(templates_dir)


def render_job(
    spec: JobSpec,
    *,
    job_id: str,
    placement: RenderPlacement,
    extra_meta: Mapping[str, str] = _NO_META,
    templates_dir: Path | None = None,
    max_run_duration: bool = False,
) -> str:
    """Render ``spec`` pinned to ``placement`` as HCL2 (see :meth:`JobRenderer.render_job`)."""
    renderer = _renderer(Path(templates_dir) if templates_dir is not None else DEFAULT_TEMPLATES_DIR)
    return renderer.render_job(spec, job_id=job_id, placement=placement, extra_meta=extra_meta,
                               max_run_duration=max_run_duration)


def render_service_job(settings: ServiceJobSettings, *, templates_dir: Path | None = None) -> str:
    """Render nomad-gpu's own Nomad job (see :meth:`JobRenderer.render_service_job`)."""
    renderer = _renderer(Path(templates_dir) if templates_dir is not None else DEFAULT_TEMPLATES_DIR)
    return renderer.render_service_job(settings)
