"""A submission's checks, in one place and one order: what a spec must pass before it is queued.

The order is part of the API: a spec with several faults is refused for the first, so the same bad
spec always gets the same answer, and the cheap checks that need no state come before those that read
the queue or the fleet. The steps (`STEPS`), in the order they run:

| step | what it refuses | status |
|---|---|---|
| body | a body that is not UTF-8 text, or empty | 400 |
| parse | what the spec loader refuses: YAML/JSON, fields, aliases, nesting, the trial cap | 400 |
| drivers | a task driver outside the allowlist (the service's, narrowed to the token's) | 403 |
| namespace | a namespace not open to submissions | 403 |
| node_pool | the job's pool (named, else its namespace's default) outside the allowlist | 403 |
| datacenters | a datacenter outside the allowlist | 403 |
| template | a template this service does not have | 400 |
| spec_size | a spec over 256 KiB as stored | 413 |
| sweep_size | a sweep whose trials would store over 64 MiB | 413 |
| team | a spec naming another team than the token's (its `user:` is bound into the meta first) | 403 |
| class | a kind the spec names beside a class whose policy does not take it | 400 |
| after | an `after:` ID that is no entry or sweep of the spec's team | 400 |
| class_fleet | a class group no tier of this fleet can ever serve (fleet known) | 422 |
| models | a `gpu.models` name that stands for several models (fleet known) | 400 |
| fleet | a job no node of the fleet could ever run (fleet known) | 422 |
| supported | what cannot be pinned yet: a class or share group with count > 1 (per trial) | 400 |
| limits | a team over its live entries or stored bytes (in the store's transaction) | 429 |

The first ten (`check_request`) need only the request and the access rules: the HTTP route runs them.
The rest (`check_queued`) need the queue and the fleet: `SchedulerService.submit` runs them for every
submission, the API's and the CLI's alike; `limits` is the store's, checked as the entries are added.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from nomad_gpu.domain.errors import InvalidRequest, NotAllowed, TooLarge
from nomad_gpu.domain.inventory import Node
from nomad_gpu.render import JobSpec, SweepSpec, parse_spec
from nomad_gpu.render.loading import decode_spec
from nomad_gpu.render.spec import META_USER
from nomad_gpu.render.sweep import expand_sweep
from nomad_gpu.service.admission.access import Caller
from nomad_gpu.service.admission.dependencies import check_after
from nomad_gpu.service.admission.fleetcheck import check_fleet
from nomad_gpu.service.admission.nodepools import allowed_pool
from nomad_gpu.service.asks.classes import ClassBook, check_classes
from nomad_gpu.service.asks.translate import check_supported
from nomad_gpu.service.config.settings import AccessSettings
from nomad_gpu.store.contract import Store

STEPS = ("body", "parse", "drivers", "namespace", "node_pool", "datacenters", "template", "spec_size", "sweep_size",
         "team", "class", "after", "class_fleet", "models", "fleet", "supported", "limits")
"""The checks in the order they run (the module's table says what each refuses)."""

MAX_STORED_SPEC_BYTES = 256 << 10
"""One job's (or one sweep's shared) spec as stored, at most: held in memory while it is queued."""
MAX_SWEEP_STORED_BYTES = 64 << 20
"""Each trial is stored with a full copy of the sweep's spec, so a sweep's trial count times its spec size
is what it writes to the queue: bounded here, before expanding, until trials share one stored spec."""


@dataclass(frozen=True)
class Request:
    """What the HTTP edge knows of a submission: its bytes, who sends it, and the service's rules."""

    body: bytes
    content_type: str
    rules: AccessSettings
    caller: Caller
    templates: Collection[str] | None = None
    namespace_pool: Callable[[str], str | None] | None = None
    """A namespace's default node pool in Nomad (None: it has none, or Nomad is not asked)."""


@dataclass(frozen=True)
class Checked:
    """A submission past `check_request`: the data to store and the spec validated from exactly that data."""

    data: dict[str, Any]
    spec: JobSpec | SweepSpec


@dataclass(frozen=True)
class Queued:
    """A submission past `check_queued`: its spec (model names resolved) and the jobs to store (a sweep's
    trials, or the job), with the sweep's ID."""

    spec: JobSpec | SweepSpec
    jobs: list[JobSpec]
    sweep_id: str | None


def check_request(req: Request) -> Checked:
    """Steps body to team: decode and validate a submitted spec for its caller, bind it to the caller's team,
    node pool and datacenters; an error of the tree at the first step that refuses."""
    text = check_body(req.body)
    as_json = "json" in req.content_type.lower()
    document = decode_spec(text, json_text=as_json)  # SpecError: a 400 like every InvalidRequest
    spec = document.parse(max_trials=req.rules.max_trials)
    rules = req.rules.narrowed(req.caller.grant)
    check_drivers(spec, rules)
    check_namespace(spec, rules)
    pool = allowed_pool(spec.node_pool, None if spec.node_pool or req.namespace_pool is None
                        else req.namespace_pool(spec.namespace), rules)
    datacenters = check_datacenters(spec, rules)
    check_template(spec, req.templates)
    check_spec_size(spec)
    if isinstance(spec, SweepSpec):
        check_sweep_size(spec)
    data = dict(document.data)
    bound = False
    if spec.node_pool is None:  # bound: placement, fleet check and the rendered job see this pool only
        data["node_pool"] = pool
        bound = True
    if datacenters is not None:  # "any" given as the datacenters this service allows
        data["datacenters"] = datacenters
        bound = True
    bound = bind_user(data, req.caller.user) or bound
    bound = check_team(data, req.caller.team) or bound
    # the data is no longer what was validated: validated again, once, here (what the queue stores)
    return Checked(data, parse_spec(data) if bound else spec)


def check_queued(spec: JobSpec | SweepSpec, *, classes: ClassBook, store: Store,
                 fleet: Callable[[], Sequence[Node] | None], new_sweep_id: Callable[[str], str]) -> Queued:
    """Steps class to supported. ``fleet``: the fleet as last seen, None before it is known (then nothing is
    checked against it: the queue takes submissions while Nomad is away); ``new_sweep_id`` names a sweep."""
    check_classes(spec, classes.policy)  # a spec's own conflict is said before what the fleet lacks
    check_after(spec, store)
    nodes = fleet()
    if nodes is not None:
        classes.check_fleet(spec)
        spec = check_fleet(spec, nodes, classes)  # models, then fleet
    if isinstance(spec, SweepSpec):
        jobs, sweep_id = expand_sweep(spec), new_sweep_id(spec.name)  # unique by construction, never by the clock
    else:
        jobs, sweep_id = [spec], None
    for job in jobs:
        check_supported(job)
    return Queued(spec, jobs, sweep_id)


def check_body(body: bytes) -> str:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"the body is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    if not text.strip():
        raise InvalidRequest("empty request body: send a job spec (YAML or JSON)")
    return text


def bind_user(data: dict[str, Any], user: str | None) -> bool:
    """Who submitted is the token's to say (`api.tokens` `user:`), never the spec's: the token's user in the
    job's meta, and one the spec wrote itself removed. Whether the data changed."""
    written = data.get("meta")
    meta: dict[str, Any] = written if isinstance(written, dict) else {}
    if user is None and META_USER not in meta:
        return False
    data["meta"] = {**{k: v for k, v in meta.items() if k != META_USER}, **({META_USER: user} if user else {})}
    return True


def check_drivers(spec: JobSpec | SweepSpec, rules: AccessSettings) -> None:
    for group in spec.groups:
        if group.task.driver not in rules.allowed_drivers:
            raise NotAllowed(f"groups[{group.name}].task.driver: {group.task.driver!r} is not allowed here (allowed: "
                             f"{', '.join(sorted(rules.allowed_drivers))}; see allowed_drivers in the service "
                             "config)")


def check_namespace(spec: JobSpec | SweepSpec, rules: AccessSettings) -> None:
    """Only configured namespaces: Nomad would refuse an unknown one at register time anyway
    (`nomad/job_endpoint_validators.go`, v2.0.5), long after the user walked away."""
    if spec.namespace not in rules.namespaces:
        raise NotAllowed(f"namespace: {spec.namespace!r} is not open to submissions here (allowed: "
                         f"{', '.join(sorted(rules.namespaces))}; see namespaces in the service config)")


def check_datacenters(spec: JobSpec | SweepSpec, rules: AccessSettings) -> list[str] | None:
    """NotAllowed for a datacenter outside the allowlist (named literally: a glob could reach others); the
    allowed list when the spec leaves them out (any) and the list is not ``*``; else None."""
    if "*" in rules.datacenters:
        return None
    if list(spec.datacenters) == ["*"]:
        return sorted(rules.datacenters)
    outside = [dc for dc in spec.datacenters if dc not in rules.datacenters]
    if outside:
        raise NotAllowed(f"datacenters: {', '.join(map(repr, outside))} not open to these submissions (allowed: "
                         f"{', '.join(sorted(rules.datacenters))}; see datacenters in the service config)")
    return None


def check_template(spec: JobSpec | SweepSpec, templates: Collection[str] | None) -> None:
    """``templates``: the job templates a spec may name; None: not checked here."""
    if templates is not None and spec.template not in templates:
        raise InvalidRequest(f"template: no template {spec.template!r} here (known: {', '.join(sorted(templates))})")


def check_spec_size(spec: JobSpec | SweepSpec) -> None:
    size = len(json.dumps(spec.model_dump(mode="json", exclude={"kind", "sweep"})).encode())
    if size > MAX_STORED_SPEC_BYTES:
        raise TooLarge(f"the spec takes {size >> 10} KiB stored, more than {MAX_STORED_SPEC_BYTES >> 10} KiB: keep "
                       "large data out of env and args (mount it, or fetch it in the task)")


def check_sweep_size(spec: SweepSpec) -> None:
    one = len(json.dumps(spec.model_dump(mode="json", exclude={"kind", "sweep"}))) + 64 * len(spec.sweep.parameters)
    total = one * spec.sweep.trial_count
    if total > MAX_SWEEP_STORED_BYTES:
        raise TooLarge(f"the sweep would store {spec.sweep.trial_count} copies of its {one}-byte spec "
                       f"({total >> 20} MiB), more than {MAX_SWEEP_STORED_BYTES >> 20} MiB: use fewer trials "
                       "or a smaller spec")


def check_team(data: dict[str, Any], team: str | None) -> bool:
    """Bind ``data`` to the token's ``team`` (None: an admin, who submits for any); NotAllowed for a spec naming
    another. True when ``data`` was changed."""
    if team is None:
        return False
    if "team" in data and data["team"] != team:
        raise NotAllowed(f"this token submits for team {team!r}; the spec names team "
                         f"{data['team']!r} (leave team out, or use that team's token)")
    if data.get("team") != team:
        data["team"] = team
        return True
    return False


__all__ = ["MAX_STORED_SPEC_BYTES", "MAX_SWEEP_STORED_BYTES", "STEPS", "Checked", "Queued", "Request",
           "check_queued", "check_request"]
