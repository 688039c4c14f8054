"""A submission meets the fleet: model names resolved to Nomad's, and what could never run refused.

Runs at submit time, against the fleet as Nomad last reported it (every node the ledger knows, down
and ineligible ones too). Two things happen here and nowhere else:

- each `gpu.models` name a user wrote becomes the exact fingerprint name it stands for
  (:mod:`nomad_gpu.domain.modelnames`), so a copied `A100` is stored as `NVIDIA A100-SXM4-80GB`; a
  spelling that stands for several models is refused with the candidates;
- a job no node could ever hold (:mod:`nomad_gpu.domain.feasible`) is refused as `Unschedulable` (HTTP
  422, exit 2) with the nearest thing the fleet offers, unless the spec says `allow_unschedulable`.

Both run on the fleet's distinct shapes (`FleetShapes`, kept per inventory), not on every node: what they
read of a node is its shape, so a submission costs the same on 1,000 alike nodes as on one.

Before the first reconcile the fleet is unknown: nothing is resolved or refused then (the queue must
take submissions while Nomad is away); the cycle still says so in the wait reason once it knows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar, cast

from nomad_gpu.domain.cycle import Wait
from nomad_gpu.domain.errors import InvalidRequest, Unschedulable
from nomad_gpu.domain.feasible import Never, never_runs, shapes
from nomad_gpu.domain.inventory import Inventory, Node
from nomad_gpu.domain.modelnames import resolve
from nomad_gpu.domain.placement import WaitReason
from nomad_gpu.domain.requests import JobRequest
from nomad_gpu.render import JobSpec, SweepSpec
from nomad_gpu.render.spec import META_SWEEP
from nomad_gpu.service.asks.classes import ClassBook
from nomad_gpu.service.asks.translate import job_request
from nomad_gpu.store import QueueEntry

S = TypeVar("S", bound=JobSpec | SweepSpec)

UNSCHEDULABLE = "unschedulable"
"""The first word of a wait reason that no node could ever satisfy (and of the refusal)."""
OPT_IN = "submit with --allow-unschedulable (allow_unschedulable: true) to queue it anyway"


def fleet_models(fleet: Sequence[Node]) -> set[str]:
    """Every GPU model of the fleet, whole, shared or in MIG mode."""
    return {g.model for n in fleet for g in n.gpus} | {m.model for n in fleet for m in n.migs}


def resolve_models(spec: S, fleet: Sequence[Node]) -> S:
    """``spec`` with each `gpu.models` name replaced by the exact model it stands for here. A name that
    stands for none is kept as written (the feasibility check says what the fleet has); one that stands
    for several is an InvalidRequest naming them."""
    known = fleet_models(fleet)
    groups = []
    changed = False
    for group in spec.groups:
        if group.gpu is None or not group.gpu.models:
            groups.append(group)
            continue
        exact: list[str] = []
        for written in group.gpu.models:
            found = resolve(written, known)
            if len(found.models) > 1:
                raise InvalidRequest(f"groups[{group.name}].gpu.models: {written!r} could be any of "
                                     f"{', '.join(found.models)}; write the one you mean")
            name = found.exact or written
            if name not in exact:
                exact.append(name)
        if exact != group.gpu.models:
            changed = True
            group = group.model_copy(update={"gpu": group.gpu.model_copy(update={"models": exact})})
        groups.append(group)
    if not changed:
        return spec
    return cast(S, spec.model_copy(update={"groups": groups}))  # the same model class as given


def request_of(spec: JobSpec | SweepSpec, classes: ClassBook | None = None) -> JobRequest:
    """What the core would be asked for one job (one trial of a sweep: every trial asks the same; it carries
    the sweep's meta, so its implicit class is the sweep's). `classes`: for groups whose class chooses."""
    job = spec if isinstance(spec, JobSpec) else JobSpec.model_construct(
        **{name: getattr(spec, name) for name in JobSpec.model_fields if name not in ("kind", "meta")},
        meta={**spec.meta, META_SWEEP: spec.name})
    probe = QueueEntry(id="q000000", name=spec.name, team=spec.team, priority=spec.priority, spec={},
                       submitted_at=0.0)
    return job_request(probe, job, classes)


def check_fleet(spec: S, fleet: Sequence[Node], classes: ClassBook | None = None) -> S:
    """Resolve model names, then refuse a job no node could run (unless the spec opts in)."""
    spec = resolve_models(spec, fleet)
    if not spec.allow_unschedulable:
        why = never_runs(request_of(spec, classes), fleet)
        if why is not None:
            raise Unschedulable(f"{UNSCHEDULABLE}: {why}; {OPT_IN}")
    return spec


def wait_reason(request: JobRequest, fleet: Sequence[Node]) -> str | None:
    """For a waiting entry: "unschedulable: ..." when no node of the fleet could ever run it, else None."""
    why: Never | None = never_runs(request, fleet)
    return f"{UNSCHEDULABLE}: {why} (the fleet has changed, or it was queued with allow_unschedulable)" \
        if why is not None else None


class FleetShapes:
    """The fleet's distinct shapes (`domain.feasible.shapes`), recomputed only when the inventory is another
    object (the ledger builds a new one whenever a node appears, changes or goes). Callers hold their lock."""

    def __init__(self) -> None:
        self._of: Inventory | None = None
        self._shapes: list[Node] = []

    def __call__(self, inventory: Inventory) -> list[Node]:
        if inventory is not self._of:
            self._shapes, self._of = shapes(inventory), inventory
        return self._shapes


class NeverCache:
    """One cycle's answers to "could this waiting job ever run?", by what it asks (many entries ask alike).
    Reasons that are about others (quota, a hold, capacity kept for an older job) are left as they are."""

    SKIP = frozenset({WaitReason.QUOTA, WaitReason.RESERVED, WaitReason.HELD})

    def __init__(self, fleet: Iterable[Node]) -> None:
        self.fleet = list(fleet)
        self.seen: dict[tuple[object, ...], str | None] = {}

    def reason(self, wait: Wait, request: JobRequest | None) -> str | None:
        if request is None or wait.reason in self.SKIP:
            return None
        key = (request.asks, request.datacenters, request.node_pool)
        if key not in self.seen:
            self.seen[key] = wait_reason(request, self.fleet)
        return self.seen[key]
