"""Idle reclaim: running jobs whose GPUs sit idle are warned, then stopped or re-queued for a waiting job.

After each round of the usage poller (service/loops/usage.py), `review` judges every running entry whose class
has an idle policy (`classes.<class>.idle`, domain/idle.py) from how long all its devices have been idle,
books the idle GPU-time (service/accounting/idleaccounts.py), and for each entry whose action is due, longest idle
first, takes it back through the life's one transition function (`Reclaim` event): `stop` ends it
`reclaimed`, `requeue` queues it again. With `only_when_waiting` it acts only when a waiting job, in the
cycle's order, would be admitted on the capacity it frees (domain/reclaimfit.py), and each waiting job
is the reason for one take-back at a time: while the stopped job drains (its devices stay booked until
Nomad reports its allocations terminal), nobody else is stopped for the same job; after a restart, which
forgets that, nothing is taken back until every stop of ours still draining is done.

The stop is Nomad's: its job is stopped, and Nomad gives each task its `kill_timeout` (`reclaim_grace_s`)
before it is killed. The owner may postpone it with `keep` (up to the class's `max_keep`), kept in the
store's meta so a restart forgets no keep.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge
from pydantic import ValidationError

from nomad_gpu.domain.classes import WorkloadClass
from nomad_gpu.domain.errors import InvalidRequest, StateConflict
from nomad_gpu.domain.idle import IdleAction, IdlePolicy, IdleVerdict, judge, minutes_left, reclaim_reason
from nomad_gpu.domain.ids import EntryId
from nomad_gpu.domain.reclaimfit import beneficiary
from nomad_gpu.render.checkpoint import CheckpointSpec, grace_s
from nomad_gpu.service.accounting.idleaccounts import IdleAccounts, key_of
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.config.idleconfig import IdlePolicies
from nomad_gpu.store import EntryState, QueueEntry
from nomad_gpu.store.entries import parse_job_id
from nomad_gpu.store.usage import UsageKeys, keys_of

if TYPE_CHECKING:
    from nomad_gpu.service.loops.scheduler import SchedulerService

logger = logging.getLogger(__name__)

KEEPS_KEY = "idle_keeps"
NOMAD_DEFAULT_KILL_TIMEOUT_S = 5.0
"""Nomad's default task `kill_timeout` (`nomad/structs/structs.go` DefaultKillTimeout, v2.0.5)."""


def reclaim_grace_s(spec: Mapping[str, Any]) -> float:
    """The grace a reclaimed job's tasks get between the stop signal and the kill: its `kill_timeout`, which is
    its `checkpoint:` grace (render/checkpoint.py), else Nomad's default."""
    raw = spec.get("checkpoint")
    try:
        return grace_s(CheckpointSpec.model_validate(raw)) if raw is not None else NOMAD_DEFAULT_KILL_TIMEOUT_S
    except ValidationError:  # a spec stored before the key was checked: Nomad's default, as it was rendered
        return NOMAD_DEFAULT_KILL_TIMEOUT_S


@dataclass(frozen=True)
class Judged:
    """A running entry's verdict, with what the user is shown."""

    verdict: IdleVerdict
    policy: IdlePolicy
    job_class: str


class IdleReclaim:
    def __init__(self, scheduler: SchedulerService, policies: IdlePolicies, accounts: IdleAccounts,
                 metrics: Metrics, *, load: Callable[[], str | None], save: Callable[[str], None]) -> None:
        self.scheduler, self.policies, self.accounts = scheduler, policies, accounts
        self._save = save
        self.keeps: dict[str, float] = {}
        try:
            self.keeps = {str(k): float(v) for k, v in json.loads(load() or "{}").items()}
        except (ValueError, TypeError, AttributeError):
            logger.warning("idle reclaim: the stored keeps are unreadable; starting from none")
        self.judged: dict[str, Judged] = {}
        self._idle_at: dict[str, float] = {}  # entry -> the last round it was seen wholly idle
        self._promised: dict[EntryId, str] = {}  # a waiting entry -> the entry stopped for it, while it drains
        self.warned = Gauge("nomad_gpu_idle_warned_entries", "Running entries idle past their class's warning "
                            "window", ["job_class"], registry=metrics.registry)
        self.reclaimed = Counter("nomad_gpu_idle_reclaimed", "Running entries taken back for being idle",
                                 ["action"], registry=metrics.registry)

    def policy_of(self, job_class: str) -> IdlePolicy | None:
        try:
            return self.policies.get(WorkloadClass(job_class))
        except ValueError:
            return None  # no class (`-`): no idle policy

    # ---- a round's review ------------------------------------------------------------------------
    def review(self, now: float, wholly: Mapping[str, float | None]) -> list[str]:
        """Judge each running entry (`wholly`: since when all its devices are idle, None: not idle), book its
        idle time and take back those due; returns the entries taken back."""
        sched = self.scheduler
        taken: list[str] = []
        with sched._lock:
            judged: dict[str, Judged] = {}
            due: list[tuple[float, str, Judged, UsageKeys]] = []
            for entry_id, since in wholly.items():
                t = sched.life.live.get(entry_id)
                if t is None or t.entry.state is not EntryState.RUNNING:
                    continue
                keys = keys_of(t.entry.spec, t.entry.placements, t.entry.sweep)
                self._book_idle(entry_id, t.entry, keys, since, now)
                policy = self.policy_of(keys.job_class)
                verdict = judge(policy, since, now, self.keeps.get(entry_id)) if policy is not None else None
                if policy is None or verdict is None:
                    continue
                judged[entry_id] = Judged(verdict, policy, keys.job_class)
                if verdict.due:
                    due.append((verdict.idle_s, entry_id, judged[entry_id], keys))
            self.judged = judged
            for gone in [e for e in self._idle_at if e not in wholly]:
                del self._idle_at[gone]
            self._settle_promises()
            if due and self._unattributed_stop():
                due = []  # whom that capacity will serve is unknown here: wait until it is free
            for _, entry_id, j, keys in sorted(due, key=lambda d: (-d[0], d[1])):
                if self._take_back(entry_id, j, keys, now):
                    taken.append(entry_id)
            self.keeps = {e: until for e, until in self.keeps.items() if until > now and e in sched.life.live}
        counts: dict[str, int] = {c.value: 0 for c in WorkloadClass}
        for j in judged.values():
            if j.verdict.warned:
                counts[j.job_class] = counts.get(j.job_class, 0) + 1
        for cls, n in counts.items():
            self.warned.labels(cls).set(n)
        self.accounts.flush(now)
        return taken

    def _book_idle(self, entry_id: str, entry: QueueEntry, keys: UsageKeys, since: float | None, now: float) -> None:
        if since is None:
            self._idle_at.pop(entry_id, None)
            return
        start = max(since, self._idle_at.get(entry_id, since))
        held = self.scheduler.ledger.get(EntryId(entry_id)) if EntryId(entry_id) in self.scheduler.ledger else None
        self.accounts.add_idle(key_of(entry.team, keys), held.gpu_equivalents if held else keys.gpu_equivalents,
                               start, now)
        self._idle_at[entry_id] = now

    def _waiting(self) -> list[Any]:
        """The queued entries the last cycle decided on, in its order, less those a take-back already serves."""
        life, positions = self.scheduler.life, self.scheduler._positions  # the last cycle's order
        out = []
        for entry in sorted(positions, key=lambda e: positions[e]):
            t = life.waiting.get(entry)
            if t is not None and t.request is not None and not t.entry.held and entry not in self._promised:
                out.append(t.request)
        return out

    def _settle_promises(self) -> None:
        """A waiting entry is again a reason to take back once the capacity stopped for it has drained."""
        draining = {d.entry_id for d in self.scheduler.life.draining.values()}
        self._promised = {w: v for w, v in self._promised.items()
                          if v in draining and w in self.scheduler.life.waiting}

    def _unattributed_stop(self) -> bool:
        """A reclaimed job still drains that no waiting job is known to wait for (this process started while
        it drained: a restart forgets whom it was stopped for), or a job of ours that no entry follows any
        more still runs (after a restart an ended job's allocation is booked apart until Nomad ends it).
        Taking anything back then might stop a second job for the same waiting one."""
        life = self.scheduler.life
        promised = set(self._promised.values())
        if any(d.record.outcome is EntryState.RECLAIMED and d.entry_id not in promised
               for d in life.draining.values()):
            return True
        return any((ref := parse_job_id(a.job_id)) is not None and ref.instance in ("", life.instance)
                   and not a.is_terminal for a in life.foreign.values())

    def _take_back(self, entry_id: str, j: Judged, keys: UsageKeys, now: float) -> bool:
        sched = self.scheduler
        waiting = self._waiting()
        victim = EntryId(entry_id)
        if j.policy.only_when_waiting:
            who = beneficiary(sched.ledger, [victim], waiting, sched.settings.fair, sched.settings.policy)
            if who is None:
                return False
        else:
            who = beneficiary(sched.ledger, [victim], waiting, sched.settings.fair, sched.settings.policy)
        reason = reclaim_reason(j.verdict.idle_s, who) if who is not None else \
            f"idle {int(j.verdict.idle_s // 60)} min: stopped (its class stops idle jobs whether or not one waits)"
        if j.policy.action is IdleAction.REQUEUE:
            reason = reason.replace(": stopped", ": re-queued", 1)
        held = sched.ledger.get(victim) if victim in sched.ledger else None
        t = sched.life.live[entry_id]
        grace = reclaim_grace_s(t.entry.spec)
        sched.life.reclaim(entry_id, reason, requeue=j.policy.action is IdleAction.REQUEUE)
        if who is not None:
            self._promised[who] = entry_id
        deadline = t.entry.spec.get("max_runtime")
        start = t.running_since or now
        until = start + float(deadline) if isinstance(deadline, int | float) else None
        self.accounts.add_reclaim(key_of(t.entry.team, keys), now, held.gpu_equivalents if held else 0.0, until)
        self.reclaimed.labels(j.policy.action.value).inc()
        self.judged.pop(entry_id, None)
        logger.info("idle reclaim: %s %s (grace %.0f s): %s", entry_id, j.policy.action.verb, grace, reason)
        return True

    # ---- keep --------------------------------------------------------------------------------------
    def keep(self, entry: QueueEntry, for_s: float, now: float, *, capped: bool = False) -> float:
        """Postpone `entry`'s reclaim for `for_s` seconds from now (`capped`: at most the class's max_keep;
        its owner's request, checked by the route); the time it is kept until. StateConflict (its state or
        class has nothing to keep) or InvalidRequest (past max_keep), nothing changed, when it cannot be."""
        if entry.state not in (EntryState.ADMITTED, EntryState.RUNNING):
            raise StateConflict(f"{entry.id} is {entry.state.value}: only a running job can be kept")
        keys = keys_of(entry.spec, entry.placements, entry.sweep)
        policy = self.policy_of(keys.job_class)
        if policy is None or not policy.takes_back:
            raise StateConflict(f"{entry.id}: class {keys.job_class} is never taken back for being idle; "
                                "nothing to keep")
        if capped:
            for_s = min(for_s, policy.max_keep_s)
        if not 0 < for_s <= policy.max_keep_s:
            raise InvalidRequest(f"keep for {minutes_left(for_s)} min: past class {keys.job_class}'s max_keep of "
                                 f"{policy.max_keep_s / 3600:g} h")
        with self.scheduler._lock:
            self.keeps[entry.id] = now + for_s
            self._save(json.dumps(self.keeps, sort_keys=True))
            if (j := self.judged.get(entry.id)) is not None:  # the clock the user sees moves at once
                since = now - j.verdict.idle_s if j.verdict.idle_s else now
                verdict = judge(j.policy, since, now, now + for_s)
                if verdict is not None:
                    self.judged[entry.id] = Judged(verdict, j.policy, j.job_class)
        return now + for_s

    def fields(self, entry_id: str) -> dict[str, Any]:
        """What an entry's `usage` gains: its idle clock in words, and the numbers behind them."""
        j = self.judged.get(entry_id)
        if j is None:
            return {"kept_until": self.keeps.get(entry_id)} if entry_id in self.keeps else {}
        v = j.verdict
        return {"idle_for_s": round(v.idle_s, 1), "idle_warned": v.warned, "idle_note": v.text if v.warned else "",
                "reclaim_in_s": None if v.act_in_s is None else round(v.act_in_s, 1),
                "kept_until": self.keeps.get(entry_id)}
