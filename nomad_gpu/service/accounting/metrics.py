"""Prometheus metrics of one service instance (its own registry, so tests can run several)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

from nomad_gpu.domain.cohorts import Standing, standings
from nomad_gpu.domain.fairshare import FairShareConfig
from nomad_gpu.domain.ids import Team

MAX_TEAM_LABELS = 200
OTHER_TEAMS = "_other"
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 259200)
"""Seconds from submission to admission: a GPU queue's waits run from seconds to days."""

Reader = Callable[[], Iterable[Metric]]


class _ReadAtScrape:
    """Families read from the running service when scraped (inventory, entries, the watcher's reconnects):
    a gauge kept up to date by hand would be stale between updates, or cost work nobody reads."""

    def __init__(self) -> None:
        self.readers: list[Reader] = []

    def collect(self) -> Iterator[Metric]:
        for read in list(self.readers):
            yield from read()


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._teams: set[str] = set()
        self._other_seen = False
        r = self.registry
        self.submitted = Counter("nomad_gpu_submitted_total", "Queue entries accepted", registry=r)
        self.admitted = Counter("nomad_gpu_admitted_total", "Entries admitted with a placement", registry=r)
        self.registered = Counter("nomad_gpu_registered_total", "Jobs registered with Nomad", registry=r)
        self.finished = Counter("nomad_gpu_finished_total", "Entries that ended, by outcome", ["outcome"],
                                registry=r)
        self.resyncs = Counter("nomad_gpu_resyncs_total", "Full re-lists of Nomad state", registry=r)
        self.cycle_seconds = Histogram("nomad_gpu_cycle_seconds", "Time of one scheduling cycle", registry=r,
                                       buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5))
        self.decisions = Counter("nomad_gpu_decisions_total", "Decisions made by cycles", registry=r)
        self.queued = Gauge("nomad_gpu_queued", "Entries waiting in the queue", registry=r)
        self.live = Gauge("nomad_gpu_live", "Entries admitted or running", registry=r)
        self.nomad_reachable = Gauge("nomad_gpu_nomad_reachable", "1 while Nomad answers, 0 while admissions "
                                     "are paused because it does not", registry=r)
        self.nomad_reachable.set(1)
        self.nomad_errors = Counter("nomad_gpu_nomad_errors_total", "Nomad calls that failed, by kind", ["kind"],
                                    registry=r)
        self.pin_mismatches = Counter("nomad_gpu_pin_mismatches_total", "Allocations Nomad placed on devices other "
                                      "than the pins booked for them (Nomad before 1.11.1 places a pin short)",
                                      registry=r)
        self.team_gpu = Gauge("nomad_gpu_team_gpu_in_use", "GPU-equivalents held per team", ["team"], registry=r)
        self.team_borrowed = Gauge("nomad_gpu_team_gpu_borrowed", "GPU-equivalents a team of a cohort holds past "
                                   "its quota, on capacity its cohort lends", ["team", "cohort"], registry=r)
        self.team_lent = Gauge("nomad_gpu_team_gpu_lent", "GPU-equivalents of a team's unused quota that its "
                               "cohort's borrowers hold", ["team", "cohort"], registry=r)
        self.wait_seconds = Histogram("nomad_gpu_wait_seconds", "Time from submission to admission, one "
                                      "observation per admission", registry=r, buckets=WAIT_BUCKETS)
        self.leader = Gauge("nomad_gpu_leader", "1 while this replica holds the leader's lease and acts on Nomad "
                            "(always 1 on SQLite), 0 while it stands by", registry=r)
        self.leader.set(1)
        self.leader_changes = Counter("nomad_gpu_leader_changes_total", "Times this replica took or lost the "
                                      "leader's lease", registry=r)
        self.preemptions = Counter("nomad_gpu_preemptions", "Running jobs preempted for a waiting one (DESIGN 17), "
                                   "by the victim's class and team", ["class", "team"], registry=r)
        self.preemption_lost = Counter("nomad_gpu_preemption_lost_gpu_seconds", "GPU-seconds of work lost to "
                                       "preemption: each victim's GPU-equivalents times its run since its start",
                                       ["class", "team"], registry=r)
        self._at_scrape = _ReadAtScrape()
        r.register(self._at_scrape)

    def observe_wait(self, seconds: float) -> None:
        self.wait_seconds.observe(max(seconds, 0.0))

    def read_at_scrape(self, reader: Reader) -> None:
        """Add families computed from the service's state at each scrape."""
        self._at_scrape.readers.append(reader)

    def observe_cycle(self, seconds: float, decisions: int) -> None:
        self.cycle_seconds.observe(seconds)
        self.decisions.inc(decisions)

    def set_queue(self, queued: int, live: int, usage: Mapping[Team, float] | Mapping[str, float],
                  fair: FairShareConfig | None = None) -> None:
        if fair is not None and any(p.cohort for p in fair.teams.values()):
            self.set_cohorts(standings({Team(t): v for t, v in usage.items()}, fair), fair)
        self.queued.set(queued)
        self.live.set(live)
        # teams come from specs: past MAX_TEAM_LABELS distinct ones, the rest share one label, so a
        # stream of made-up team names cannot grow the registry (and every scrape) without bound
        folded: dict[str, float] = {}
        for team, value in usage.items():
            label = team if team in self._teams or len(self._teams) < MAX_TEAM_LABELS else OTHER_TEAMS
            if label != OTHER_TEAMS:
                self._teams.add(label)
            folded[label] = folded.get(label, 0.0) + value
        for team in (self._teams | {OTHER_TEAMS}) - set(folded):
            if team in self._teams or self._other_seen:
                self.team_gpu.labels(team).set(0)
        for team, value in folded.items():
            self.team_gpu.labels(team).set(value)
        self._other_seen = self._other_seen or OTHER_TEAMS in folded

    def set_cohorts(self, teams: Mapping[Team, Standing], fair: FairShareConfig) -> None:
        """Borrowed and lent per team of a cohort (configured teams only, so the label set is bounded)."""
        for team, s in teams.items():
            cohort = fair.team(team).cohort
            if cohort is not None and team in fair.teams:
                self.team_borrowed.labels(team, cohort).set(s.borrowed)
                self.team_lent.labels(team, cohort).set(s.lent)

    def team_label(self, team: str) -> str:
        """A team as a label: past MAX_TEAM_LABELS distinct teams, the rest share one (as `set_queue` folds)."""
        if team in self._teams or len(self._teams) < MAX_TEAM_LABELS:
            self._teams.add(team)
            return team
        return OTHER_TEAMS

    def render(self) -> bytes:
        return generate_latest(self.registry)
