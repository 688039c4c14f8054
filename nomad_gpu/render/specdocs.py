"""docs/spec.md, generated from the spec models: every field with its type, unit, default and an example.

A hand-written field reference drifts from the models the day a field is added. This module reads the
models themselves (:mod:`nomad_gpu.render.spec`): field names (their aliases, as a user writes them),
types and bounds from the annotations, defaults from the fields, and each field's description from the
docstring written under it in the model; what a docstring cannot say compactly (the unit, an example,
a description where the model has none) is :data:`EXTRA`. ``make spec-docs`` writes the page and a test
fails when the page in the tree is not what this module writes, or when a field has no description.
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
import types
import typing
from collections.abc import Iterator
from typing import Any

from annotated_types import Ge, Gt, Le, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from nomad_gpu.render.checkpoint import CheckpointSpec
from nomad_gpu.render.groupspec import GpuSpec, GroupSpec, MigSpec, ResourcesSpec, ShareSpec, TaskSpec
from nomad_gpu.render.network import CheckSpec, PortSpec, ServiceSpec
from nomad_gpu.render.spec import DevSpec, JobSpec, SweepSpec
from nomad_gpu.render.sweepconfig import SweepConfig, SweepRange

SECTIONS: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("The job", JobSpec, "The top level of a spec file. `task:` (and `count`, `resources`, `gpu`, `mig`, "
     "`share`, `gpu_memory`, `ports`, `service`) may sit here instead of `groups:`: they become one group named "
     "`main`. `ports:` and `service:` may also sit here beside `groups:` with one group."),
    ("A sweep", SweepSpec, "`kind: sweep` with every field of a job, plus `sweep:`. Each trial is a job named "
     "`<name>-t<index>` that sees its parameters as `TRIAL_<NAME>` in its environment."),
    ("sweep", SweepConfig, "Which parameter combinations a sweep runs, and how many at once."),
    ("sweep.parameters.NAME as a range", SweepRange, "Instead of a list, `mode: random` may sample a parameter "
     "from a range: `{min: 1e-5, max: 1e-1, log: true}` (log-uniform), `{min: 16, max: 256, int: true}`."),
    ("groups[]", GroupSpec, "One Nomad task group: `count` allocations of one task, with at most one of `gpu`, "
     "`mig`, `share`. Every group of a job is placed on one node, together or not at all."),
    ("task", TaskSpec, "What runs."),
    ("resources", ResourcesSpec, "CPU and memory per allocation, as Nomad counts them."),
    ("gpu", GpuSpec, "Whole GPUs per allocation."),
    ("mig", MigSpec, "MIG instances of one profile per allocation."),
    ("share", ShareSpec, "A time-slice share of one shared GPU."),
    ("ports.NAME", PortSpec, "A named port of the group (`ports: {http: {to: 8000}, metrics: {static: 9100}}`; "
     "`http: {}` is a dynamic port), rendered in the group's Nomad `network` block. The address Nomad assigns "
     "(`host:port`) is shown by `nomad-gpu status`, the dashboard and the entry's `addresses` in the API."),
    ("service", ServiceSpec, "A service registration, rendered as the group's Nomad `service` block: "
     "`service: {name: chat, port: http, check: {type: http, path: /health}}`."),
    ("service.check", CheckSpec, "The health check Nomad runs against the service."),
    ("dev", DevSpec, "How the embedded dev cluster runs the job; a real Nomad ignores it."),
    ("checkpoint", CheckpointSpec, "The checkpoint grace (docs/classes.md, Preemption): when its GPUs are taken "
     "back, the task gets `signal`, then `grace` to save its state before Nomad kills it (Nomad's `kill_signal` "
     "and `kill_timeout`). Nomad's clients cap `kill_timeout` at their `max_kill_timeout` (30 s by default): a "
     "longer grace is accepted with a warning unless the operator raised it (`nomad.max_kill_timeout`)."),
)

EXTRA: dict[str, tuple[str, str, str]] = {
    # "<Model>.<field>": (unit, example, description when the model has no docstring for it)
    "JobSpec.kind": ("", "job", "`job` (the default) or `sweep`."),
    "SweepSpec.kind": ("", "sweep", "`sweep`: this spec is run once per parameter combination."),
    "JobSpec.name": ("", "resnet-train", "The job's name: 1-48 characters of a-z, 0-9, `-`."),
    "JobSpec.team": ("", "vision", "The team it runs for (quota, fair share). A team token sets it."),
    "JobSpec.priority": ("1-100", "70", "Order in the queue: higher first, then fair share, then age."),
    "JobSpec.datacenters": ("", '["dc1"]', "Datacenters it may run in; `*` matches any run of characters."),
    "JobSpec.namespace": ("", "ml", "The Nomad namespace of its job (one the service is configured for)."),
    "JobSpec.node_pool": ("", "reserved", "The Nomad node pool it must run in; unset: its namespace's default "
                          "pool, else `default` (as Nomad)."),
    "JobSpec.template": ("", "service", "The Jinja2 template (`templates/<name>.hcl.j2`) that renders its HCL."),
    "JobSpec.retries": ("attempts", "2", "How often a failed or lost run is started again."),
    "JobSpec.meta": ("", '{"owner": "ana"}', "Job meta, shown in the Nomad UI (keys `nomad_gpu_*` are reserved)."),
    "JobSpec.groups": ("", "see groups[]", "The task groups, admitted together (a gang)."),
    "JobSpec.dev": ("", "{duration_s: 120}", "How the dev cluster runs it."),
    "JobSpec.runtime": ("seconds, or 90s/30m/4h/1d", "2h", ""),
    "JobSpec.max_runtime": ("seconds, or 90s/30m/4h/1d", "12h", ""),
    "JobSpec.allow_unschedulable": ("", "true", ""),
    "JobSpec.preemptible": ("", "false", "Whether a waiting job may take its GPUs back: `true`, `false`; unset: its "
                            "class decides (exploratory, hpo, interactive yes; training with `checkpoint:`; serving "
                            "never; no class: no)."),
    "JobSpec.checkpoint": ("", "{signal: SIGTERM, grace: 120s}", "The signal and grace its task gets to save its "
                           "state when stopped; unset: Nomad's SIGINT, then 5 s."),
    "CheckpointSpec.signal": ("", "SIGUSR1", "The signal the task receives first (Nomad's `kill_signal`): SIGTERM, "
                              "SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGALRM."),
    "CheckpointSpec.grace": ("seconds, or 90s/30m/1h", "120s", "How long it may take to save its state before it "
                             "is killed (Nomad's `kill_timeout`), more than 0 and at most 1 h."),
    "JobSpec.after": ("", "[q000012, lr-sweep-s3]", ""),
    "JobSpec.workload_class": ("", "training", "What the job is (serving, training, hpo, exploratory, "
                               "interactive): the service chooses whole GPU, MIG or share from it."),
    "SweepSpec.sweep": ("", "see sweep", "The parameters and how they are combined."),
    "SweepConfig.parameters": ("", "{lr: [0.1, 0.01], batch: [32, 64]}",
                               "Each parameter's values: a list (grid or random), or a range "
                               "`{min, max, log, int}` sampled by `mode: random`."),
    "SweepConfig.mode": ("", "random", "`grid`: every combination; `random`: `trials` draws."),
    "SweepConfig.trials": ("trials", "20", "How many combinations `mode: random` draws (required there)."),
    "SweepConfig.seed": ("", "7", "The random draw's seed: the same seed gives the same trials."),
    "SweepConfig.max_parallel": ("trials", "4", "At most this many trials queued for admission at once."),
    "SweepRange.min": ("", "1e-5", ""),
    "SweepRange.max": ("", "0.1", ""),
    "SweepRange.log": ("", "true", ""),
    "SweepRange.integer": ("", "true", ""),
    "GroupSpec.name": ("", "worker", "The group's name (unique in the job)."),
    "GroupSpec.count": ("allocations", "2", "Allocations of this group, all on the job's one node."),
    "GroupSpec.task": ("", "see task", "What each allocation runs."),
    "GroupSpec.resources": ("", "{cpu: 4000, memory: 16384}", "CPU and memory per allocation."),
    "GroupSpec.gpu": ("", "{count: 2}", "Whole GPUs per allocation."),
    "GroupSpec.mig": ("", "{profile: 3g.40gb}", "MIG instances per allocation."),
    "GroupSpec.share": ("", "{milli: 250}", "A time-slice share of one shared GPU."),
    "GroupSpec.workload_class": ("", "serving", "Overrides the job's class for this group."),
    "GroupSpec.gpu_memory": ("GiB, or text with a unit", "14GiB",
                             "GPU memory the work needs; with a class, the service picks the kind that holds it."),
    "TaskSpec.driver": ("", "docker", "The Nomad task driver (one the service allows)."),
    "TaskSpec.image": ("", "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime", "The image (required for docker)."),
    "TaskSpec.command": ("", "python", "The command; unset: the image's entry point."),
    "TaskSpec.args": ("", '["train.py", "--epochs", "10"]', "Its arguments."),
    "TaskSpec.env": ("", "{EPOCHS: 10}", "Environment (NVIDIA_VISIBLE_DEVICES is set by the service)."),
    "ResourcesSpec.cpu": ("MHz", "4000", "CPU per allocation."),
    "ResourcesSpec.memory": ("MiB", "16384", "Memory per allocation, a number of MiB (`16384` for 16 GiB; `16GB` "
                                              "is refused with the number to write)."),
    "ResourcesSpec.memory_max": ("MiB", "32768", "Memory it may burst to (at least `memory`)."),
    "GpuSpec.count": ("GPUs", "8", "Whole GPUs per allocation, of one model, on one node."),
    "GpuSpec.models": ("", "[A100, H100]", "Allowed models, as `inventory` shows them (short or full name); "
                       "unset: any."),
    "GpuSpec.min_memory_mib": ("MiB", "40960", "The least memory each GPU must have."),
    "GpuSpec.nvlink": ("", "true", "Only GPUs joined by NVLink (an NVSwitch fabric or whole bridged pairs, on a node "
                       "whose device plugin publishes its topology: docs/topology.md); the job waits for such a set "
                       "rather than take PCIe peers, and is refused where no node could ever give one. Needs "
                       "`count` >= 2."),
    "MigSpec.profile": ("", "3g.40gb", "The MIG profile (`<compute>g.<memory>gb`)."),
    "MigSpec.count": ("instances", "1", "Instances of it per allocation."),
    "GroupSpec.ports": ("", "{http: {to: 8000}}", ""),
    "GroupSpec.service": ("", "see service", ""),
    "PortSpec.static": ("port", "9100", ""),
    "PortSpec.to": ("port", "8000", ""),
    "ServiceSpec.name": ("", "chat", ""),
    "ServiceSpec.port": ("", "http", ""),
    "ServiceSpec.provider": ("", "consul", ""),
    "ServiceSpec.tags": ("", "[llm, v1]", ""),
    "ServiceSpec.check": ("", "{type: http, path: /health}", ""),
    "CheckSpec.type": ("", "tcp", ""),
    "CheckSpec.path": ("", "/health", ""),
    "CheckSpec.interval": ("seconds, or 10s/1m", "30s", ""),
    "CheckSpec.timeout": ("seconds, or 2s/1m", "5s", ""),
    "ShareSpec.milli": ("milli-GPU (1000 = the whole GPU)", "250", "The share of one GPU's time."),
    "DevSpec.duration_s": ("seconds", "120", "How long the task runs on the dev cluster."),
    "DevSpec.fail": ("", "true", "End the task with a failure instead of success."),
    "DevSpec.gpu_util": ("%", "[[0, 80], [600, 0]]", ""),
    "DevSpec.exit_on_signal_after_s": ("seconds", "20", "Its tasks handle the kill signal and exit 0 this many "
                                       "seconds later (a task that checkpoints); unset, they ignore it and are "
                                       "killed at the end of the grace."),
}


def field_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """The docstrings written under fields in the model's source (and its bases'), by field name."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:], strict=False):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(
                    after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
                found[node.target.id] = " ".join(after.value.value.split())
    return found


def type_text(annotation: Any) -> str:
    """`int`, `list of text`, `one of grid, random`, `map of text to text`... as a user reads them."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin in (typing.Union, types.UnionType):
        kinds = [type_text(a) for a in args if a is not type(None)]
        return " or ".join(dict.fromkeys(kinds))
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        return f"list of {type_text(args[0])}"
    if origin is tuple:
        return "[" + ", ".join(type_text(a) for a in args) + "]"
    if origin is dict:
        return f"map of {type_text(args[0])} to {type_text(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    return {str: "text", int: "integer", float: "number", bool: "boolean"}.get(annotation, str(annotation))


def _bounds(info: FieldInfo) -> str:
    parts: list[str] = []
    for m in _metadata(info.annotation, info.metadata):
        if isinstance(m, Ge):
            parts.append(f">= {m.ge}")
        elif isinstance(m, Gt):
            parts.append(f"> {m.gt}")
        elif isinstance(m, Le):
            parts.append(f"<= {m.le}")
        elif isinstance(m, MinLen) and m.min_length:
            parts.append(f"at least {m.min_length}")
        elif isinstance(m, MaxLen):
            parts.append(f"at most {m.max_length}")
    return ", ".join(dict.fromkeys(parts))


def _metadata(annotation: Any, metadata: list[Any]) -> Iterator[Any]:
    for m in metadata:
        yield from m.metadata if isinstance(m, FieldInfo) else (m,)
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is typing.Annotated:
            yield from _metadata(Any, list(getattr(arg, "__metadata__", ())))
            yield from _metadata(typing.get_args(arg)[0], [])
        elif typing.get_origin(arg) in (typing.Union, types.UnionType):
            yield from _metadata(arg, [])


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]
    if value is PydanticUndefined or value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "its defaults"
    return f"`{json.dumps(value)}`" if not isinstance(value, str) else f"`{value}`"


def rows(model: type[BaseModel]) -> Iterator[tuple[str, str, str, str, str, str]]:
    """(field as written, type, unit, default, description, example) for every field of ``model``."""
    docs = field_docstrings(model)
    for name, info in model.model_fields.items():
        if model is SweepSpec and name not in ("kind", "sweep"):
            continue  # the job's fields, documented once above
        unit, example, text = EXTRA.get(f"{model.__name__}.{name}", ("", "", ""))
        description = docs.get(name) or text or (info.description or "")
        if not description:
            raise LookupError(f"{model.__name__}.{name} has no description: write a docstring under the field "
                              "or an entry in nomad_gpu/render/specdocs.py EXTRA")
        bounds = _bounds(info)
        kind = type_text(info.annotation) + (f" ({bounds})" if bounds else "")
        yield (info.alias or name, kind, unit, _default(info), description, f"`{example}`" if example else "")


def render() -> str:
    """The whole page."""
    out = ["# The job spec, field by field", "",
           "Generated from the spec models by `make spec-docs` (`python -m nomad_gpu.render.specdocs`); "
           "a test fails when this page is stale. Examples of whole specs: `nomad-gpu example`.", ""]
    for title, model, intro in SECTIONS:
        out += [f"## {title}", "", intro, "", "| field | type | unit | default | what it is | example |",
                "|---|---|---|---|---|---|"]
        out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows(model)]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover - `make spec-docs`
    print(render(), end="")
