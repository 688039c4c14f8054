"""Random event sequences through the life's transition function, against a small model of Nomad and
of the ledger (pure: no service, no clock). What must hold whatever happens, in any order:

- no device is booked twice, and every allocation Nomad runs sits on a device the ledger still holds for
  its attempt (so nothing lands on GPUs given to the next job);
- every attempt is ended, queued, live, or draining with its capacity while Nomad stops its job; once
  Nomad answers everything, nothing is left draining and no capacity is left booked for an ended attempt;
- every stored move is a compare-and-set the store's table allows; a stop never races a register;
- a duplicated event changes nothing.

`HYPOTHESIS_PROFILE=ci` derandomizes it (tests/conftest.py); the examples are few and each is short, so a
failure shows in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from nomad_gpu.service.life import events as ev
from nomad_gpu.service.life.machine import apply
from nomad_gpu.service.life.record import Phase, Record
from nomad_gpu.store import EntryState
from nomad_gpu.store.entries import TRANSITIONS

ENTRIES = ("q0", "q1")
DEVICES = ("d0", "d1")
Key = tuple[str, int]
IDEMPOTENT = (ev.Unhold, ev.Reject)
"""Effects a repeat may give again: dropping a hold already dropped, refusing a request again."""


@dataclass
class Job:
    """Nomad's side of one attempt: its job (once registered), its allocations (id -> terminal)."""

    device: str
    exists: bool = False
    stopped: bool = False
    completed: bool = False
    """An allocation completed: Nomad places nothing more for a batch job."""
    allocs: dict[str, bool] = field(default_factory=dict)

    @property
    def running(self) -> list[str]:
        return [a for a, done in self.allocs.items() if not done]


@dataclass
class World:
    retries: int
    records: dict[Key, Record] = field(default_factory=dict)
    current: dict[str, Key] = field(default_factory=dict)
    stored: dict[str, EntryState] = field(default_factory=dict)
    ledger: dict[str, str] = field(default_factory=dict)
    """device -> holder: `e:<entry>` while live, `j:<entry>/<attempt>` while draining."""
    jobs: dict[Key, Job] = field(default_factory=dict)
    registers: set[Key] = field(default_factory=set)
    acknowledged: set[Key] = field(default_factory=set)
    stops: set[Key] = field(default_factory=set)
    serial: int = 0

    def __post_init__(self) -> None:
        for e in ENTRIES:
            self.records[(e, 0)] = Record(e, retries_left=self.retries)
            self.current[e] = (e, 0)
            self.stored[e] = EntryState.QUEUED

    # ---- the runner, as a model ------------------------------------------------------------------
    def send(self, key: Key, event: ev.Event) -> None:
        before = self.records[key]
        after, effects = apply(before, event)
        self.records[key] = after
        for fx in effects:
            self.perform(key, fx, after)
        again, repeat = apply(after, event)  # a duplicate (a replayed stream event, a second click)
        assert again == after, (before, event)
        assert all(isinstance(fx, IDEMPOTENT) for fx in repeat), (after, event, repeat)

    def perform(self, key: Key, fx: ev.Effect, after: Record) -> None:
        entry, attempt = key
        if isinstance(fx, ev.Move):
            now = self.stored[entry]
            assert now in fx.expect, (key, fx, now)  # compare-and-set
            assert fx.to is now or fx.to in TRANSITIONS[now], (key, fx, now)
            self.stored[entry] = fx.to
        elif isinstance(fx, ev.Register):
            assert key not in self.stops
            assert key not in self.acknowledged, "an acknowledged register is sent again"
            self.registers.add(key)
        elif isinstance(fx, ev.Stop):
            assert key not in self.registers, "a stop races a register in flight"
            self.stops.add(key)
        elif isinstance(fx, ev.Drain):
            for d, holder in list(self.ledger.items()):
                if holder == f"e:{entry}":
                    self.ledger[d] = f"j:{entry}/{attempt}"
        elif isinstance(fx, ev.Release):
            self._free(f"e:{entry}", key)
        elif isinstance(fx, ev.ReleaseDrained):
            assert key not in self.registers
            self._free(f"j:{entry}/{attempt}", key)
        elif isinstance(fx, ev.Requeued):
            nxt = (entry, attempt + 1)
            self.records[nxt] = Record(entry, attempt + 1, retries_left=max(0, after.retries_left - 1))
            self.current[entry] = nxt

    def _free(self, holder: str, key: Key) -> None:
        job = self.jobs.get(key)
        assert job is None or not job.running, f"{key}'s capacity freed while Nomad runs {job.running}"
        for d in [d for d, h in self.ledger.items() if h == holder]:
            del self.ledger[d]

    # ---- what can happen ---------------------------------------------------------------------------
    def admit(self, entry: str) -> None:
        key = self.current[entry]
        free = [d for d in DEVICES if d not in self.ledger]
        r = self.records[key]
        if r.phase is not Phase.QUEUED or r.held or not free or self.stored[entry] is not EntryState.QUEUED:
            return
        assert f"e:{entry}" not in self.ledger.values()
        self.ledger[free[0]] = f"e:{entry}"  # the cycle reserves, then the life cycle admits
        self.jobs[key] = Job(free[0])
        self.send(key, ev.Admit(1))

    def reply(self, key: Key, kind: int) -> None:
        if key not in self.registers:
            return
        self.registers.discard(key)
        job = self.jobs[key]
        if kind == 0:
            job.exists = True
            self.acknowledged.add(key)
            self.send(key, ev.RegisterOk(key[1]))
        elif kind == 1:
            job.exists = job.exists or self.serial % 2 == 0  # a lost reply: it may have landed
            self.send(key, ev.RegisterLost(key[1], "timeout"))
        elif job.exists:  # create-only: a retry finds its own job
            self.acknowledged.add(key)
            self.send(key, ev.RegisterOk(key[1]))
        else:
            self.send(key, ev.RegisterRefused(key[1], "invalid"))

    def place(self, key: Key) -> None:
        job = self.jobs.get(key)
        if job is None or not job.exists or job.stopped or job.completed or job.running:
            return  # one group of one: a replacement only after its allocation failed
        self.serial += 1
        alloc = f"a{self.serial}"
        job.allocs[alloc] = False
        holder = self.ledger.get(job.device)
        assert holder in (f"e:{key[0]}", f"j:{key[0]}/{key[1]}"), f"{alloc} lands on {job.device} held by {holder}"
        self.send(key, ev.AllocUpdate(alloc))

    def finish(self, key: Key, ok: bool) -> None:
        job = self.jobs.get(key)
        if job is None or not job.running:
            return
        alloc = job.running[0]
        job.allocs[alloc] = True
        ok = ok and not job.stopped
        job.completed = job.completed or ok
        self.send(key, ev.AllocUpdate(alloc, terminal=True, succeeded=ok, complete=ok,
                                      outcome="complete" if ok else "failed"))

    def stop(self, key: Key) -> None:
        if key not in self.stops:
            return
        self.stops.discard(key)
        job = self.jobs[key]
        job.stopped = True
        self.send(key, ev.StopConfirmed(tuple(job.allocs.items())))

    def nomad(self, key: Key, what: int) -> None:
        """What a resync or an evaluation tells about the attempt's job."""
        job = self.jobs.get(key)
        if job is None or key in self.registers:
            return
        if what == 0 and not job.exists:
            self.send(key, ev.JobGone())
        elif what == 1 and job.exists and not job.allocs:
            job.stopped = True  # someone stopped it outside
            self.send(key, ev.JobDeregistered())
        elif what == 2 and job.exists and not job.allocs:
            self.send(key, ev.EvalRefused("no driver"))
        elif what == 3 and (job.stopped or not job.exists) and not job.running:
            self.send(key, ev.AllocsGone())

    def check(self) -> None:
        for key, r in self.records.items():
            entry, attempt = key
            drained = f"j:{entry}/{attempt}" in self.ledger.values()
            assert r.phase in (Phase.QUEUED, Phase.ADMITTED, Phase.RUNNING, Phase.PREEMPTING, Phase.DRAINING,
                               Phase.ENDED)
            assert drained == (r.phase is Phase.DRAINING), (key, r)
            held = r.phase.live or r.phase is Phase.PREEMPTING  # a preempting attempt keeps its own booking
            if held:
                assert self.current[entry] == key and f"e:{entry}" in self.ledger.values(), (key, r)
            if self.current[entry] == key and not held:
                assert f"e:{entry}" not in self.ledger.values(), (key, r)
            assert r.phase is not Phase.ENDED or not self.jobs.get(key, Job("")).running or not r.booked, (key, r)
        for key, job in self.jobs.items():
            for _ in job.running:
                assert self.ledger.get(job.device) in (f"e:{key[0]}", f"j:{key[0]}/{key[1]}"), (key, self.ledger)

    def settle(self) -> None:
        """Nomad answers everything and every allocation ends: nothing is left draining."""
        for _ in range(20):
            for key in list(self.registers):
                self.reply(key, 0)
            for key in list(self.stops):
                self.stop(key)
            for key, job in list(self.jobs.items()):
                if self.records[key].phase in (Phase.DRAINING, Phase.PREEMPTING):
                    while job.running:
                        self.finish(key, False)
            self.check()
        assert not [k for k, r in self.records.items() if r.phase in (Phase.DRAINING, Phase.PREEMPTING)], self.records
        assert all(h.startswith("e:") for h in self.ledger.values()), self.ledger


USER: dict[str, ev.Event] = {
        "cancel": ev.Cancel(), "requeue": ev.Requeue(), "hold": ev.Hold(True), "release": ev.Hold(False),
        "deadline": ev.TimerFired(ev.Timer.DEADLINE, "late"), "runtime": ev.TimerFired(ev.Timer.RUNTIME, "t"),
        "retry": ev.TimerFired(ev.Timer.RETRY), "resume": ev.Resume(), "preempt": ev.Preempt(),
        "reclaim": ev.Reclaim(), "reclaim-stop": ev.Reclaim("idle 31 min: stopped for q2", requeue=False),
        "dependency": ev.DependencyFailed("dep")}


class Lives(RuleBasedStateMachine):
    """Each step draws among what can happen now, so the search spends itself on real courses."""

    def __init__(self) -> None:
        super().__init__()
        self.w = World(retries=1)
        self.last: dict[str, tuple[Key, ev.AllocUpdate]] = {}
        """Nomad's latest word on each allocation: what a resync or a rewound stream says again."""

    @rule(data=st.data())
    def admit(self, data: st.DataObject) -> None:
        w = self.w
        ready = [e for e in ENTRIES if w.records[w.current[e]].phase is Phase.QUEUED]
        if ready:
            w.admit(data.draw(st.sampled_from(ready)))

    @rule(data=st.data(), kind=st.integers(0, 2))
    def reply(self, data: st.DataObject, kind: int) -> None:
        if self.w.registers:
            self.w.reply(data.draw(st.sampled_from(sorted(self.w.registers))), kind)

    @rule(data=st.data())
    def place(self, data: st.DataObject) -> None:
        w = self.w
        jobs = sorted(k for k, j in w.jobs.items() if j.exists and not (j.stopped or j.completed or j.running))
        if jobs:
            key = data.draw(st.sampled_from(jobs))
            w.place(key)
            alloc = max(w.jobs[key].allocs, key=lambda a: int(a[1:]))
            self.last[alloc] = key, ev.AllocUpdate(alloc)

    @rule(data=st.data(), ok=st.booleans())
    def finish(self, data: st.DataObject, ok: bool) -> None:
        w = self.w
        jobs = sorted(k for k, j in w.jobs.items() if j.running)
        if jobs:
            key = data.draw(st.sampled_from(jobs))
            alloc, stopped = w.jobs[key].running[0], w.jobs[key].stopped
            w.finish(key, ok)
            ok = ok and not stopped
            self.last[alloc] = key, ev.AllocUpdate(alloc, terminal=True, succeeded=ok, complete=ok,
                                                   outcome="complete" if ok else "failed")

    @rule(data=st.data())
    def stop(self, data: st.DataObject) -> None:
        if self.w.stops:
            self.w.stop(data.draw(st.sampled_from(sorted(self.w.stops))))

    @rule(data=st.data(), what=st.integers(0, 3))
    def nomad(self, data: st.DataObject, what: int) -> None:
        if self.w.jobs:
            self.w.nomad(data.draw(st.sampled_from(sorted(self.w.jobs))), what)

    @rule(entry=st.sampled_from(ENTRIES), name=st.sampled_from(sorted(USER)))
    def user_or_timer(self, entry: str, name: str) -> None:
        self.w.send(self.w.current[entry], USER[name])

    @rule(data=st.data())
    def replay(self, data: st.DataObject) -> None:
        """Nomad says again what it said last about an allocation: nothing changes."""
        if self.last:
            key, update = self.last[data.draw(st.sampled_from(sorted(self.last)))]
            before = self.w.records[key]
            after, effects = apply(before, update)
            assert after == before and not effects, (before, update, effects)

    @invariant()
    def holds(self) -> None:
        self.w.check()

    def teardown(self) -> None:
        self.w.settle()


Lives.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_random_lives_book_nothing_twice_and_leave_nothing_behind = Lives.TestCase
