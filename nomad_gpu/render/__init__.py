"""The render layer: job specs in, pinned HCL2 jobspecs out (DESIGN 3.7).

``load_spec`` reads a user's YAML into a :class:`JobSpec` or :class:`SweepSpec`,
``expand_sweep`` turns a sweep into one job spec per trial, and ``render_job``
renders a spec plus the placement the scheduler chose through a Jinja2 template
whose every value is HCL-escaped. This package does no network I/O and reads no
environment; it reads spec files and templates only when asked to.
"""

from nomad_gpu.render.groupspec import GpuSpec, GroupSpec, MigSpec, ResourcesSpec, ShareSpec, TaskSpec
from nomad_gpu.render.hcl import RenderError, decode_hcl_string, hcl_literal, hcl_string, parse_hcl
from nomad_gpu.render.jobs import (
    DEFAULT_TEMPLATES_DIR,
    META_DEV_DURATION,
    META_DEV_EXIT,
    META_ENTRY,
    META_NAME,
    META_SHARE_GPU,
    META_SHARE_MILLI,
    META_TEAM,
    JobRenderer,
    ServiceJobSettings,
    build_job_context,
    render_job,
    render_service_job,
)
from nomad_gpu.render.loading import load_spec, parse_spec
from nomad_gpu.render.placement import GroupPlacement, RenderPlacement, check_placement
from nomad_gpu.render.spec import DevSpec, JobSpec, SpecError, SweepSpec
from nomad_gpu.render.sweep import META_SWEEP, META_TRIAL, META_TRIAL_PREFIX, expand_sweep, trial_parameters
from nomad_gpu.render.sweepconfig import SweepConfig

__all__ = [
    "DEFAULT_TEMPLATES_DIR",
    "META_DEV_DURATION",
    "META_DEV_EXIT",
    "META_ENTRY",
    "META_NAME",
    "META_SHARE_GPU",
    "META_SHARE_MILLI",
    "META_SWEEP",
    "META_TEAM",
    "META_TRIAL",
    "META_TRIAL_PREFIX",
    "DevSpec",
    "GpuSpec",
    "GroupPlacement",
    "GroupSpec",
    "JobRenderer",
    "JobSpec",
    "MigSpec",
    "RenderError",
    "RenderPlacement",
    "ResourcesSpec",
    "ServiceJobSettings",
    "ShareSpec",
    "SpecError",
    "SweepConfig",
    "SweepSpec",
    "TaskSpec",
    "build_job_context",
    "check_placement",
    "decode_hcl_string",
    "expand_sweep",
    "hcl_literal",
    "hcl_string",
    "load_spec",
    "parse_hcl",
    "parse_spec",
    "render_job",
    "render_service_job",
    "trial_parameters",
]
