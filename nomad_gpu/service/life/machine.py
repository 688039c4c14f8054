"""The life of a job as one pure function (DESIGN 16): `apply(record, event) -> (record, effects)`.

A record is one attempt of one entry: its stored state and the scheduler's own states beside it (a
register in flight, draining). `apply` decides; it reads no clock, store or Nomad, so the whole life can
be tested as a table and as random event sequences. The runner (`service/life/lifecycle.py`) performs the
effects in the order given, which is the order that keeps the guarantees of docs/reliability.md: an end
is stored with its stop intent before the capacity moves; a draining attempt keeps its capacity until its
job is stopped, no register is in flight and every allocation is terminal; a cancel during a register in
flight stops after the reply; an acknowledged register is never sent again.

An event that does not apply to the record's phase (a replay, a duplicate, a reply to an older attempt)
returns the record unchanged and no effect.
"""

from __future__ import annotations

from dataclasses import replace

from nomad_gpu.service.life import events as ev
from nomad_gpu.service.life.events import Effect, Event
from nomad_gpu.service.life.record import LIVE_STATES, Phase, Record
from nomad_gpu.store import EntryState

Result = tuple[Record, tuple[Effect, ...]]


def apply(r: Record, e: Event) -> Result:
    """The next record and what must be done, in order."""
    if r.fenced or (r.phase is Phase.ENDED and isinstance(e, ev.LeaseLost)):
        return r, ()
    if isinstance(e, ev.LeaseLost):
        return replace(r, fenced=True), (ev.Forget(),)
    if r.phase is Phase.QUEUED:
        return _queued(r, e)
    if r.phase.live:
        return _live(r, e)
    if r.phase is Phase.PREEMPTING:
        return _preempting(r, e)
    if r.phase is Phase.DRAINING:
        return _draining(r, e)
    return _ended(r, e)


# ---- queued -----------------------------------------------------------------------------------------
def _queued(r: Record, e: Event) -> Result:
    q = (EntryState.QUEUED,)
    if isinstance(e, ev.Admit) and not r.held:
        return (replace(r, phase=Phase.ADMITTED, registering=True, registered=False, booked=True, open=frozenset(),
                        done=frozenset(), clean=True, failures=0, groups=max(e.groups, 1)),
                (ev.Move(EntryState.ADMITTED, q, ""), ev.Register()))
    if isinstance(e, ev.Cancel):
        return _close(r, EntryState.CANCELLED, "cancelled by user", unhold=True)
    if isinstance(e, ev.DependencyFailed):
        end = _close(r, EntryState.DEPENDENCY_FAILED, e.reason)
        return end[0], (*end[1], ev.Count(EntryState.DEPENDENCY_FAILED.value))
    if isinstance(e, ev.SpecInvalid):
        return _close(r, EntryState.FAILED, e.reason)
    if isinstance(e, ev.Hold):
        unhold: tuple[Effect, ...] = (ev.Unhold(),) if e.held else ()
        if r.held == e.held:
            return r, unhold
        reason = "held by user" if e.held else "released by user"
        return replace(r, held=e.held), (*unhold, ev.Move(EntryState.QUEUED, q, reason, held=e.held), ev.Wake())
    return r, ()


def _close(r: Record, to: EntryState, reason: str, *, unhold: bool = False) -> Result:
    """A queued entry ends without running: nothing is held and no job exists."""
    first: tuple[Effect, ...] = (ev.Unhold(),) if unhold else ()
    return (replace(r, phase=Phase.ENDED, outcome=to),
            (*first, ev.Move(to, (EntryState.QUEUED,), reason), ev.Forget()))


# ---- admitted and running ---------------------------------------------------------------------------
def _live(r: Record, e: Event) -> Result:
    if isinstance(e, (ev.RegisterOk, ev.RegisterLost, ev.RegisterRefused, ev.RegisterDeferred)):
        return _reply(r, e) if e.attempt == r.attempt else (r, ())
    if isinstance(e, ev.AllocUpdate):
        return _alloc(r, e)
    if isinstance(e, ev.EvalRefused):
        if r.phase is not Phase.ADMITTED:
            return r, ()
        return _refused(r, f"Nomad could not place it: {e.reason}", avoid=e.avoid)
    if isinstance(e, ev.Cancel):
        return _unhold(_end(r, EntryState.CANCELLED, "cancelled by user"))
    if isinstance(e, ev.Requeue):
        return _end(r, EntryState.QUEUED, "re-queued by user", refused=True)
    if isinstance(e, ev.Hold):
        return r, ((ev.Unhold(),) if e.held else ()) + (ev.Reject(_not_queued(r, e.held)),)
    if isinstance(e, ev.TimerFired):
        return _timer(r, e)
    if isinstance(e, ev.Resume):
        if r.phase is Phase.ADMITTED and not r.registered and not r.registering:
            return replace(r, registering=True), (ev.Register(),)
        return r, ()
    if isinstance(e, ev.JobGone):
        return _end(r, EntryState.FAILED, "its Nomad job is gone (garbage-collected or purged while unobserved); "
                    "outcome unknown", stop=False)
    if isinstance(e, ev.JobDead):
        return _end(r, EntryState.FAILED, "its Nomad job is dead without allocations")
    if isinstance(e, ev.JobDeregistered):
        if r.open or r.done or r.registering:
            return r, ()
        return _retry_or_fail(r, "its Nomad job was stopped outside nomad-gpu")
    if isinstance(e, ev.Reclaim) and not e.requeue:  # idle reclaim's stop: its own end, nobody's failure
        return _then(_end(r, EntryState.RECLAIMED, e.reason), ev.Count("reclaimed"))
    if isinstance(e, ev.Preempt) and r.phase is Phase.RUNNING:
        return _start_preempting(r, e)
    if isinstance(e, (ev.Preempt, ev.Reclaim)):
        label = "preempted" if isinstance(e, ev.Preempt) else "reclaimed"
        return _then(_end(r, EntryState.QUEUED, e.reason, refused=True), ev.Count(label))
    return r, ()


def _not_queued(r: Record, held: bool) -> str:
    return (f"{r.entry} is {r.state.value}: only a queued entry can be "
            f"{'held' if held else 'released'}")


def _reply(r: Record, e: ev.RegisterOk | ev.RegisterLost | ev.RegisterRefused | ev.RegisterDeferred) -> Result:
    if isinstance(e, ev.RegisterDeferred):
        if not r.registering:
            return r, ()
        return replace(r, registering=False), (ev.RetryRegister(r.failures, soon=True),)
    if not r.registering:
        return r, ()  # a reply already applied (a duplicate)
    if isinstance(e, ev.RegisterOk) or r.open or r.done:
        # an allocation of this attempt was seen, so its job exists: a retry's "never sent" (the entry moved on
        # to running before it went) or its lost reply is no refusal, and no further retry is needed
        watch = (ev.WatchDeadline(),) if isinstance(e, ev.RegisterOk) else ()
        return replace(r, registering=False, registered=True, failures=0), (ev.MarkRegistered(), *watch)
    r = replace(r, registering=False)
    if isinstance(e, ev.RegisterLost):
        failures = r.failures + 1
        return replace(r, failures=failures), (ev.RetryRegister(failures), ev.Unreachable(e.reason, e.forbidden))
    return _end(r, EntryState.FAILED, f"Nomad refused the job: {e.reason}", stop=False)


def _alloc(r: Record, e: ev.AllocUpdate) -> Result:
    if e.cut_off:  # its task may run on where Nomad cannot see: queued again, no retry used; capacity kept
        r = _seen(r, e.alloc, False, False)
        return _then(_end(r, EntryState.QUEUED, e.cut_off, refused=True, durable=False), ev.Count("lost"))
    if e.replaced_by:  # Nomad's replacement in the same job carries the attempt on: this one neither ends the
        # attempt nor counts toward its completion (a pending allocation of a node marked down, docs/partitions.md)
        return replace(r, open=r.open - {e.alloc}), ()
    r = _seen(r, e.alloc, e.terminal, e.complete)
    if e.pin_short:
        return _refused(r, e.pin_short, count="refused")
    effects: tuple[Effect, ...] = ()
    if not e.terminal and r.phase is Phase.ADMITTED:
        r = replace(r, phase=Phase.RUNNING)
        effects = (ev.Move(EntryState.RUNNING, (EntryState.ADMITTED,), None, durable=False), ev.Started())
    if not e.terminal:
        return r, effects
    if e.timeout:
        return _then(_end(r, EntryState.FAILED, e.timeout, durable=False), ev.Count("timeout"))
    if e.preempted:  # nobody's failure: queued again as a refusal is, no retry used; the GPUs are the
        # preemptor's, released at once when the attempt has nothing left running (else drained as any end)
        return _then(_end(r, EntryState.QUEUED, e.preempted, release_now=not r.open, refused=True, durable=False),
                     ev.Count("preempted"))
    if e.ended_cut_off:  # its node was cut off and the task is gone: queued again as a live `lost` is, no retry
        # used; the client reported the end, so the GPUs are free at once when nothing else of it runs
        return _then(_end(r, EntryState.QUEUED, e.ended_cut_off, release_now=not r.open, refused=True,
                          durable=False), ev.Count("lost"))
    if not e.succeeded:
        return _retry_or_fail(r, f"allocation {e.outcome}", durable=False)
    if len(r.done) >= max(r.groups, 1):
        # every allocation ended by itself, successfully: a batch job Nomad will not replace is left as Nomad
        # keeps it; a service job's (exit 0 ends `failed`, a reschedule may replace it) is stopped and drains
        return _then(_end(r, EntryState.COMPLETE, "", release_now=r.clean, stop=not r.clean, durable=False),
                     ev.Count("complete"))
    return r, effects


def _seen(r: Record, alloc: str, terminal: bool, complete: bool) -> Record:
    if terminal:
        return replace(r, open=r.open - {alloc}, done=r.done | {alloc}, clean=r.clean and complete
                       if alloc not in r.done else r.clean)
    return replace(r, open=r.open | {alloc}, done=r.done - {alloc})


def _timer(r: Record, e: ev.TimerFired) -> Result:
    if r.registering:
        return r, ()
    if e.timer is ev.Timer.RETRY and r.phase is Phase.ADMITTED and not r.registered:
        return replace(r, registering=True), (ev.Register(),)
    if e.timer is ev.Timer.DEADLINE and r.phase is Phase.ADMITTED and r.registered and not (r.open or r.done):
        return _refused(r, e.reason, count="refused")
    if e.timer is ev.Timer.RUNTIME and r.phase is Phase.RUNNING:
        return _then(_end(r, EntryState.FAILED, e.reason), ev.Count("timeout"))
    return r, ()


def _refused(r: Record, why: str, *, avoid: bool = True, count: str = "refused") -> Result:
    """Nomad would not place it: queued again, away from its nodes for a while, without using a retry."""
    out = _end(r, EntryState.QUEUED, why, refused=True)
    return out[0], (ev.Avoid(avoid), *out[1], ev.Count(count))


def _retry_or_fail(r: Record, why: str, durable: bool = True) -> Result:
    if r.retries_left > 0:
        return _then(_end(r, EntryState.QUEUED, f"retrying after {why}", durable=durable), ev.Count("retried"))
    return _then(_end(r, EntryState.FAILED, why, durable=durable), ev.Count("failed"))


def _end(r: Record, to: EntryState, reason: str, *, release_now: bool = False, stop: bool = True,
         refused: bool = False, durable: bool = True, expect: tuple[EntryState, ...] = LIVE_STATES) -> Result:
    """End the attempt: the outcome and the stop intent in one store write first; then its capacity drains
    (kept until Nomad stopped it) unless it ended cleanly; then the next attempt is followed; the stop is
    sent now unless a register is in flight (its reply sends it)."""
    move = ev.Move(to, expect, reason, requeue=to is EntryState.QUEUED, refused=refused, stop=stop,
                   durable=durable)
    draining = r.booked and not release_now and stop
    nxt = replace(r, phase=Phase.DRAINING if draining else Phase.ENDED, outcome=to,
                  booked=draining, stopped=False)
    effects: list[Effect] = [move, ev.Drain() if draining else ev.Release()]
    effects.append(ev.Requeued() if to is EntryState.QUEUED else ev.Forget())
    if stop and not r.registering:
        effects.append(ev.Stop())
    effects.append(ev.Wake())
    return nxt, tuple(effects)


def _then(result: Result, last: Effect) -> Result:
    """`result`, then `last` (a metric counts only what was stored)."""
    return result[0], (*result[1], last)


def _unhold(result: Result) -> Result:
    """`result`, after the cycle's head-of-line hold for the entry is dropped."""
    return result[0], (ev.Unhold(), *result[1])


# ---- preempting (DESIGN 17) -------------------------------------------------------------------------
_PREEMPTING = (EntryState.PREEMPTING,)


def _start_preempting(r: Record, e: ev.Preempt) -> Result:
    """Stored `preempting` with its stop intent first; it keeps its booking while Nomad stops its job."""
    move = ev.Move(EntryState.PREEMPTING, (EntryState.RUNNING,), e.reason, stop=True)
    return replace(r, phase=Phase.PREEMPTING, stopped=False, exited=True), (move, ev.Stop())


def _preempting(r: Record, e: Event) -> Result:
    if isinstance(e, ev.AllocUpdate):
        r = _seen(r, e.alloc, e.terminal, e.complete)
        if e.terminal and not e.exited_zero:
            r = replace(r, exited=False)
        return _preempted(r)
    if isinstance(e, ev.StopConfirmed):
        seen = r.open | r.done
        new = [(a, t) for a, t in e.allocs if a not in seen]
        return _preempted(replace(r, stopped=True, open=r.open | {a for a, t in new if not t},
                                  done=r.done | {a for a, t in new if t}, exited=r.exited and not new))
    if isinstance(e, (ev.AllocsGone, ev.JobGone, ev.JobDead)):
        if not r.stopped and isinstance(e, ev.AllocsGone):
            return r, ()
        return _preempted(replace(r, stopped=True, open=frozenset(), exited=False))
    if isinstance(e, ev.Cancel):  # its stop is under way: the cancel ends it, and it drains as any end
        return _unhold(_end(r, EntryState.CANCELLED, "cancelled by user", expect=_PREEMPTING))
    if isinstance(e, (ev.Hold, ev.Requeue)):
        held = (ev.Unhold(),) if isinstance(e, ev.Hold) and e.held else ()
        return r, (*held, ev.Reject(f"{r.entry} is preempting: it is queued again once Nomad stopped it"))
    return r, ()


def _preempted(r: Record) -> Result:
    """Every allocation is terminal and the stop confirmed: queued again (no retry used, the preemptor's
    reason kept), or complete when every task exited 0 in its grace. The capacity goes back now."""
    if not r.stopped or r.open:
        return r, ()
    if r.exited and r.done:
        done = replace(r, phase=Phase.ENDED, outcome=EntryState.COMPLETE, booked=False)
        return done, (ev.Move(EntryState.COMPLETE, _PREEMPTING, "exited 0 in its checkpoint grace"), ev.Release(),
                      ev.Forget(), ev.Wake(), ev.Count("complete"))
    queued = replace(r, phase=Phase.ENDED, outcome=EntryState.QUEUED, booked=False)
    return queued, (ev.Move(EntryState.QUEUED, _PREEMPTING, None, requeue=True, refused=True), ev.Release(),
                    ev.Requeued(), ev.Wake(), ev.Count("preempted"))


# ---- draining ---------------------------------------------------------------------------------------
def _draining(r: Record, e: Event) -> Result:
    if isinstance(e, (ev.RegisterOk, ev.RegisterLost, ev.RegisterDeferred)) and e.attempt == r.attempt:
        if not r.registering:
            return r, ()
        return replace(r, registering=False), (ev.Stop(),)  # the job may exist now: stop it after the register
    if isinstance(e, ev.RegisterRefused) and e.attempt == r.attempt:
        if not r.registering:
            return r, ()
        return _maybe_release(replace(r, registering=False, stopped=True), (ev.StopDone(),))
    if isinstance(e, ev.AllocUpdate):  # a cut-off one stays open: its task may still run (docs/partitions.md)
        return _maybe_release(_seen(r, e.alloc, e.terminal and not e.cut_off, e.complete), ())
    if isinstance(e, ev.CutOffExpired):
        if e.alloc not in r.open:
            return r, ()
        return _maybe_release(_seen(r, e.alloc, True, False), ())
    if isinstance(e, (ev.Cancel, ev.Hold, ev.Requeue)):
        return _ended(r, e)
    if isinstance(e, ev.StopConfirmed):
        seen = r.open | r.done
        new = [(a, t) for a, t in e.allocs if a not in seen]
        nxt = replace(r, stopped=True, open=r.open | {a for a, t in new if not t},
                      done=r.done | {a for a, t in new if t})
        return _maybe_release(nxt, ())
    if isinstance(e, ev.AllocsGone):
        if not r.stopped:
            return r, ()
        return _maybe_release(replace(r, open=frozenset(), done=frozenset()), ())
    return r, ()


def _maybe_release(r: Record, effects: tuple[Effect, ...]) -> Result:
    if r.stopped and not r.registering and not r.open:
        return replace(r, phase=Phase.ENDED, booked=False), (*effects, ev.ReleaseDrained())
    return r, effects


# ---- ended ------------------------------------------------------------------------------------------
def _ended(r: Record, e: Event) -> Result:
    if isinstance(e, ev.Cancel):
        return r, (ev.Unhold(),)
    if isinstance(e, ev.Hold):
        return r, ((ev.Unhold(),) if e.held else ()) + (ev.Reject(_not_queued(r, e.held)),)
    if isinstance(e, ev.Requeue) and r.outcome is not None and r.outcome.is_terminal():
        return r, (ev.Reject(f"{r.entry} is {r.outcome.value}: submit it again instead"),)
    return r, ()
