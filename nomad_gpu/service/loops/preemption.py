"""Preemption in the service (DESIGN 17): after each cycle, take GPUs back for waiting jobs that may.

The choice is the domain's (`domain/preemption.py` over the cycle's fitter and `domain/victims.py`); this
module gathers its inputs (the cycle's waiting jobs in its own order, the running attempts with their class,
priority, start and past preemptions) and carries it out through the life's one transition function: each
victim gets a `Preempt` event (stored `preempting` with its stop intent and a reason naming the preemptor and
the node; Nomad stops it with its checkpoint grace; it keeps its capacity until every allocation is
terminal). The preemptor holds the victims' node (the cycle's holds: nothing else is placed there), so the
devices freed are its own, and it is admitted by a cycle only once the ledger has them back, which is only
when Nomad reported every victim allocation terminal.

Crash safety: nothing here is needed after a kill -9 that the store does not hold. A victim's stored reason
(`preempted by <entry> (<class>) on <node>`) and placements name its preemptor and the node; the
preemptor's stored reason (`preempting ... on <node>`) names them once its victims are queued again. The
first cycle after a start rebuilds the holds from those (`recover`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field, replace

from nomad_gpu.domain.cohorts import borrowed
from nomad_gpu.domain.cycle import CycleResult, Wait
from nomad_gpu.domain.fairshare import FairShareConfig
from nomad_gpu.domain.ids import EntryId, NodeId, Team
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.policies import get_policy
from nomad_gpu.domain.preemption import Preemption, Running, Waiting, plan_preemptions
from nomad_gpu.domain.reclaim import RECLAIM, owed, plan_reclaims
from nomad_gpu.render import JobSpec
from nomad_gpu.render.checkpoint import grace_s
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.asks.classes import job_class
from nomad_gpu.service.asks.translate import placement_from_json
from nomad_gpu.service.config.preemptconfig import grace_warning
from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.life import events as ev
from nomad_gpu.service.life.lifecycle import Lifecycle
from nomad_gpu.service.life.tracking import Tracked
from nomad_gpu.store import EntryState, QueueEntry

logger = logging.getLogger(__name__)

BY = re.compile(r"^preempted by (q\d+) \(")
"""A preempting victim's reason: its preemptor."""
LOOKED_AT = 8
"""Waiting jobs a cycle looks at for a preemption, in its own order (bounds the cost of a cycle)."""
FOR = re.compile(r"^preempting (q\d+(?:, q\d+)*) on node (\S+)")
"""A preemptor's reason while its victims stop: them, and the node (its ID)."""


@dataclass
class InProgress:
    """A preemption under way: the preemptor holds `node` until it is admitted (or gives up)."""

    plan: Preemption
    node_name: str
    grace_s: float
    victims_left: set[EntryId] = field(default_factory=set)
    fresh: bool = False
    """Rebuilt after a restart: kept one cycle even with no victim left, so the preemptor gets its node."""


def preemptions_of(entry: QueueEntry) -> int:
    """Times the entry was preempted, from its stored moves (the last 20: enough for max_preemptions <= 5)."""
    return sum(1 for h in entry.history if h.get("to") == EntryState.PREEMPTING.value)


def started_at(t: Tracked) -> float:
    """When the attempt started running: seen by this process, else its stored move, else its admission."""
    if t.running_since:
        return t.running_since
    runs = [h.get("at") for h in t.entry.history if h.get("to") == EntryState.RUNNING.value]
    last = runs[-1] if runs else None
    return float(last) if isinstance(last, int | float) else float(t.entry.admitted_at or 0.0)


class Preemptions:
    """Owned by the scheduler; every method runs under the service lock."""

    def __init__(self, settings: SchedulingSettings, ledger: Ledger, life: Lifecycle, metrics: Metrics,
                 fair: Callable[[], FairShareConfig] | None = None) -> None:
        """``fair()``: the teams as configured now (a reload swaps them)."""
        self.settings, self.policy = settings.take_back, settings.take_back.preemption
        self.fair = fair or (lambda: settings.fair)
        self.fit_policy = get_policy(settings.policy)
        self.ledger, self.entries, self.metrics = ledger, life.entries, metrics
        self.run: Callable[[Tracked, ev.Event], None] = life.apply_event
        self.in_progress: dict[EntryId, InProgress] = {}
        self.waiting_since: dict[EntryId, float] = {}
        """When this process first saw each entry wait (a restart starts the clock again: it waits longer)."""
        self.recovered = False
        self.written: dict[EntryId, str] = {}
        """The reason last stored here for each waiting entry (so an unchanged one is not written each cycle)."""

    # ---- around a cycle -----------------------------------------------------------------------
    def before_cycle(self, holds: MutableMapping[EntryId, frozenset[NodeId]]) -> None:
        """The first cycle after a start (Nomad's nodes known): the holds of the preemptions under way."""
        if not self.recovered and len(self.ledger.inventory):
            self.recover(holds)

    def after_cycle(self, result: CycleResult, holds: MutableMapping[EntryId, frozenset[NodeId]], now: float,
                    reasons: MutableMapping[str, str]) -> None:
        """Start what the cycle's waits allow; keep each preemptor's hold and reason while its victims stop."""
        self.before_cycle(holds)
        waits = [d for d in result.decisions if isinstance(d, Wait)]
        waiting_ids = {d.entry for d in waits}
        for entry in list(self.waiting_since):
            if entry not in waiting_ids:
                del self.waiting_since[entry]
                self.written.pop(entry, None)
        for d in waits:
            self.waiting_since.setdefault(d.entry, now)
        self._settle(holds, waiting_ids)
        if self.policy.enabled:
            self._start(waits, holds, now)
        self._reclaim(waits, holds, now, reasons)  # a lender's quota is guaranteed, with class preemption off too
        for preemptor, p in self.in_progress.items():
            self._say(preemptor, p, reasons)
        for d in waits:
            self._keep_why(d.entry, reasons)

    def _settle(self, holds: MutableMapping[EntryId, frozenset[NodeId]], waiting: set[EntryId]) -> None:
        """Forget preemptions whose preemptor was admitted, cancelled or left the queue; one whose victims are
        all back but that still did not fit lets its node go (it may preempt again, guards permitting)."""
        for preemptor, p in list(self.in_progress.items()):
            p.victims_left = {v for v in p.victims_left if self._preempting(v)}
            gone = preemptor not in waiting
            if p.fresh and not gone:
                p.fresh = False
            elif gone or not p.victims_left:
                del self.in_progress[preemptor]
                if not gone or holds.get(preemptor) == frozenset({p.plan.node}):
                    holds.pop(preemptor, None)
                continue
            holds[preemptor] = frozenset({p.plan.node})

    def _preempting(self, entry: EntryId) -> bool:
        t = self.entries.get(entry)
        return t is not None and t.entry.state is EntryState.PREEMPTING

    def _start(self, waits: list[Wait], holds: MutableMapping[EntryId, frozenset[NodeId]], now: float) -> None:
        waiting = []
        for d in waits:  # the cycle's order; only the first few that waited long enough are looked at
            t = self.entries.get(d.entry)
            if t is None or t.request is None or d.entry in self.in_progress:
                continue
            if now - self.waiting_since[d.entry] >= self.policy.preempt_after_s:
                waiting.append(Waiting(t.request, job_class(t.spec), self.waiting_since[d.entry]))
            if len(waiting) >= LOOKED_AT:
                break
        if not waiting:
            return  # the usual case: nothing waited `preempt_after` yet (so no running job is read)
        running = {EntryId(t.entry.id): r for t in self.entries.values()
                   if t.entry.state is EntryState.RUNNING and t.spec is not None
                   and (r := self._running(t)).preemptible and self.policy.guard(r, now) is None}
        if not running:
            return  # nothing may be taken back now, whatever waits
        plans = plan_preemptions(waiting, running, self.ledger, policy=self.policy, fit_policy=self.fit_policy,
                                 now=now, held=holds, busy_entries=self.in_progress)
        for plan in plans:
            self._carry_out(plan, running, holds, now)

    def _reclaim(self, waits: list[Wait], holds: MutableMapping[EntryId, frozenset[NodeId]], now: float,
                 reasons: MutableMapping[str, str]) -> None:
        """Jobs owed their team's lent quota take it back from the cohort's borrowers (domain/reclaim.py): no
        `min_runtime` or `preempt_after`, and `max_preemptions` does not protect borrowed work."""
        fair = self.fair()
        if not any(p.cohort is not None for p in fair.teams.values()):
            return
        usage = self.ledger.team_usage()
        waiting = [Waiting(t.request, job_class(t.spec), self.waiting_since.get(d.entry, now)) for d in waits
                   if d.entry not in self.in_progress and (t := self.entries.get(d.entry)) is not None
                   and t.request is not None and owed(t.request.team, t.request.gpu_equivalents, usage, fair)]
        if not waiting:
            return
        running = {EntryId(t.entry.id): r for t in self.entries.values()
                   if t.entry.state is EntryState.RUNNING and t.spec is not None and t.entry.team not in
                   {w.job.team for w in waiting} and (r := self._running(t)).preemptible}
        busy_nodes = {n for e, nodes in holds.items() for n in nodes}
        plans = plan_reclaims(waiting, running, self.ledger, fair=fair, fit_policy=self.fit_policy,
                              busy_nodes=busy_nodes, busy_entries=self.in_progress, limit=LOOKED_AT)
        for plan in plans:
            self._carry_out(plan, running, holds, now)
        started = {p.preemptor for p in plans}
        fixed = self._borrowed_fixed(fair, now)
        for w in waiting:
            t = self.entries[w.job.entry]
            if w.job.entry not in started and fixed and not t.entry.reason.startswith("waiting for"):
                reasons[t.entry.id] = f"{fixed}; {reasons.get(t.entry.id, t.entry.reason)}".rstrip("; ")

    def _borrowed_fixed(self, fair: FairShareConfig, now: float) -> str:
        """What a lender waits for under `borrow_requires: any`: borrowed work that is not preemptible, by team,
        with when it ends where its spec gives a `runtime:` (e.g. `waiting for 4 GPUs lent to nlp (not
        preemptible; ends in ~20 min)`); empty when there is none."""
        usage = self.ledger.team_usage()
        gpus: dict[str, float] = {}
        ends: dict[str, float] = {}
        for t in self.entries.values():
            team = Team(t.entry.team)
            if (t.entry.state is not EntryState.RUNNING or t.spec is None or borrowed(team, usage, fair) <= 0
                    or self._running(t).preemptible or t.entry.id not in self.ledger):
                continue
            gpus[team] = gpus.get(team, 0.0) + self.ledger.get(EntryId(t.entry.id)).gpu_equivalents
            if t.spec.runtime:
                end = started_at(t) + float(t.spec.runtime)
                ends[team] = min(ends.get(team, end), end)
        parts = []
        for name, g in sorted(gpus.items()):
            lent = min(g, borrowed(Team(name), usage, fair))
            when = f"; ends in ~{max(ends[name] - now, 0) / 60:.0f} min" if name in ends else ""
            parts.append(f"waiting for {lent:g} GPU lent to {name} (not preemptible{when})")
        return ", ".join(parts)

    def _running(self, t: Tracked) -> Running:
        spec = t.spec
        assert spec is not None
        cls = job_class(spec)
        allowed = self.policy.victim_allowed(cls, spec.preemptible, spec.checkpoint is not None)
        return Running(EntryId(t.entry.id), Team(t.entry.team), cls, t.entry.priority, started_at(t), allowed,
                       preemptions_of(t.entry))

    def _carry_out(self, plan: Preemption, running: Mapping[EntryId, Running],
                   holds: MutableMapping[EntryId, frozenset[NodeId]], now: float) -> None:
        preemptor = self.entries[plan.preemptor]
        nf = self.ledger.index.get(plan.node)
        name = nf.node.name if nf is not None and nf.node.name else str(plan.node)
        why = f"reclaim of team {preemptor.entry.team}'s lent quota" if plan.why == RECLAIM else (
            job_class(preemptor.spec) or "priority")
        reason = f"preempted by {plan.preemptor} ({why}) on {name}"
        graces = []
        for victim in plan.victims:
            t = self.entries[victim]
            gpus = self.ledger.get(victim).gpu_equivalents if victim in self.ledger else 0.0
            self.run(t, ev.Preempt(reason))
            if t.entry.state is not EntryState.PREEMPTING:
                continue  # the store said no (it moved meanwhile): nothing to count
            r = running[victim]
            labels = (r.cls or "none", self.metrics.team_label(str(r.team)))
            self.metrics.preemptions.labels(*labels).inc()
            self.metrics.preemption_lost.labels(*labels).inc(gpus * max(now - r.started_at, 0.0))
            graces.append(grace_s(t.spec.checkpoint if t.spec is not None else None))
            logger.info("entry %s: %s (%s), grace %.0f s", victim, reason, plan.why, graces[-1])
        if not graces:
            return
        self.in_progress[plan.preemptor] = InProgress(plan, name, max(graces), set(plan.victims))
        holds[plan.preemptor] = frozenset({plan.node})

    def _say(self, preemptor: EntryId, p: InProgress, reasons: MutableMapping[str, str]) -> None:
        t = self.entries.get(preemptor)
        if t is None:
            return
        text = (f"preempting {', '.join(sorted(p.victims_left))} on node {p.plan.node} ({p.node_name}): waiting "
                f"for them to stop (grace up to {p.grace_s:g} s)")
        if t.entry.reason != text or preemptor in reasons:
            self._reason(t, text, reasons)

    def _keep_why(self, entry: EntryId, reasons: MutableMapping[str, str]) -> None:
        """A victim queued again says first why (`preempted by ...`), then why it waits now."""
        t = self.entries.get(entry)
        history = t.entry.history if t is not None else ()
        if t is None or len(history) < 2 or history[-1].get("from") != EntryState.PREEMPTING.value:
            return
        why = str(history[-2].get("reason") or "")
        now = reasons.get(entry, t.entry.reason)
        if why.startswith("preempted by") and not now.startswith(why):
            self._reason(t, f"{why}; {now}" if now else why, reasons)

    def _reason(self, t: Tracked, text: str, reasons: MutableMapping[str, str]) -> None:
        """Say `text` for a waiting entry; stored only when it changed (the cycle wrote its own words first)."""
        entry = EntryId(t.entry.id)
        t.entry = replace(t.entry, reason=text)
        if self.written.get(entry) == text:
            reasons.pop(entry, None)  # stored already: the cycle's words for it are not written either
        else:
            reasons[entry] = text
            self.written[entry] = text

    # ---- after a restart ----------------------------------------------------------------------
    def recover(self, holds: MutableMapping[EntryId, frozenset[NodeId]]) -> None:
        """Rebuild the preemptions under way from the store's words (victims preempting; preemptors queued)."""
        self.recovered = True
        victims: dict[EntryId, set[EntryId]] = {}
        nodes: dict[EntryId, NodeId] = {}
        for t in self.entries.values():
            m = BY.match(t.entry.reason)
            if t.entry.state is EntryState.PREEMPTING and m is not None:
                preemptor = EntryId(m.group(1))
                victims.setdefault(preemptor, set()).add(EntryId(t.entry.id))
                for p in t.entry.placements:
                    nodes[preemptor] = placement_from_json(p).node
        for t in self.entries.values():
            m = FOR.match(t.entry.reason)
            if t.entry.state is EntryState.QUEUED and m is not None and EntryId(t.entry.id) not in nodes:
                nodes[EntryId(t.entry.id)] = NodeId(m.group(2))
                victims.setdefault(EntryId(t.entry.id), set())
        for preemptor, node in nodes.items():
            holder = self.entries.get(preemptor)
            if holder is None or holder.entry.state is not EntryState.QUEUED:
                continue
            nf = self.ledger.index.get(node)
            name = nf.node.name if nf is not None and nf.node.name else str(node)
            plan = Preemption(preemptor, node, tuple(sorted(victims[preemptor])), "recovered")
            self.in_progress[preemptor] = InProgress(plan, name, 0.0, set(victims[preemptor]), fresh=True)
            holds[preemptor] = frozenset({node})
            logger.info("entry %s: preemption on %s resumed after a restart (%d victim(s) stopping)", preemptor,
                        name, len(victims[preemptor]))

    def status(self) -> dict[str, object]:
        """The preemptions under way and the graces the nodes cut short, for `status`."""
        return {"preemptions": [{"preemptor": e, "node": p.plan.node, "node_name": p.node_name,
                                 "victims": sorted(p.plan.victims), "stopping": sorted(p.victims_left),
                                 "why": p.plan.why} for e, p in sorted(self.in_progress.items())],
                "grace_warnings": grace_warnings(((e, t.spec) for e, t in self.entries.items()),
                                                 self.settings.max_kill_timeout_s)}


def grace_warnings(specs: Iterable[tuple[str, JobSpec | None]], max_kill_timeout_s: float) -> dict[str, str]:
    """Entries whose checkpoint grace is longer than the nodes honour, with the warning for each."""
    out = {}
    for entry, spec in specs:
        if spec is not None and spec.checkpoint is not None:
            if text := grace_warning(spec.checkpoint.grace, max_kill_timeout_s):
                out[entry] = text
    return out
