"""The dev cluster's single source of truth: nodes, jobs, allocations, the raft index and the ledger.

Every write takes one lock, advances the raft index (one counter shared by all writes, as in Nomad)
and publishes its events before the lock is released, so the event stream is a faithful, ordered
log of the state. Writes come from HTTP handlers, the embedding API (fault injection) and the timer
thread (tasks starting and finishing). Reads live in `queries.py`; the scheduler pass (evaluations,
placements) in `scheduling.py` and an allocation's life on its client in `alloclife.py`, both bound here as
methods.

Nomad behaviour kept here (reference sections 3, 6 and 8):
- a register places what is missing and nothing else: an allocation of the same job that is live or
  `complete` is never placed again, so a repeated register never starts a second copy;
- what does not fit stays queued (a blocked eval) and is retried whenever capacity frees;
- terminal allocations release their devices at once; `lost` ones are replaced, `failed` ones are
  rescheduled per the group's reschedule policy (immediately: delays are not simulated).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from . import (
    alloclife,
    evals,
    gc,
    kills,
    maxrun,
    migjobs,
    namespaces,
    nodeops,
    scheduling,
    systemjobs,
)
from .allocs import Alloc, ClientStatus
from .clienttruth import Partitions
from .config import ClusterSpec
from .election import Election
from .evals import Evaluation
from .events import Event, EventBroker
from .faults import Faults
from .inventory import Node, build_nodes
from .jobs import JSON, SYSTEM_TYPES, canonicalize, group_asks, job_event, stamp_version, validate
from .ledger import DeviceLedger
from .records import JobRecord, NotFound, Pending
from .register import RegisterOptions, admission_errors, enforce_index, spec_changed
from .runner import TimerHeap
from .summaryindex import SummaryIndex
from .version import DEFAULT_NOMAD_VERSION, NomadVersion


class ClusterState:
    def __init__(self, cluster: ClusterSpec, broker: EventBroker, timers: TimerHeap, *, speed: float,
                 clock: Callable[[], float] = time.time,
                 nomad_version: str | NomadVersion = DEFAULT_NOMAD_VERSION) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.lock = threading.RLock()
        self._nomad_version: str | NomadVersion = nomad_version
        self._short_offers = _short_offers(nomad_version)
        self.cluster = cluster
        self.broker = broker
        self.timers = timers
        self.speed = speed
        self.clock = clock
        self.index = 0
        self.ledger = DeviceLedger()
        self.mig_log = migjobs.MigLog()  # MIG re-layouts run as jobs (migjobs.py)
        self.nodes: dict[str, Node] = {}
        self.jobs: dict[tuple[str, str], JobRecord] = {}
        self.allocs: dict[str, Alloc] = {}
        self.live: dict[str, Alloc] = {}  # the non-terminal subset of `allocs`
        self.live_by_node: dict[str, dict[str, Alloc]] = {}  # `live` by node ID (passviews.py)
        self.by_job: dict[tuple[str, str], list[Alloc]] = {}
        self.pending: list[Pending] = []
        self.register_log: dict[tuple[str, str], list[float]] = {}
        self.evals: dict[str, Evaluation] = {}
        self.evals_by_job: dict[tuple[str, str], list[str]] = {}
        self.open_evals: set[str] = set()  # IDs of evaluations not yet terminal
        self.reaped: list[Alloc] = []  # allocations removed by garbage collection, kept for the audit
        self.gc_counts = {"runs": 0, "jobs": 0, "evals": 0, "allocs": 0}
        self.namespaces = frozenset({"default", *cluster.namespaces})  # the names of `namespace_records`
        self.namespace_records = namespaces.initial(self.namespaces)  # created at run time too (namespaces.py)
        self.namespace_index = 1
        self.table_index: dict[str, int] = {}
        """The index of each table's last write: what a list's `X-Nomad-Index` is (`state.Index("allocs")` in
        nomad/alloc_endpoint.go `List`, `"nodes"` in nomad/node_endpoint.go `List`, v2.0.5)."""
        self.election = Election(timers, clock)  # windows without a leader (election.py)
        self.failing_evals = 0  # the next N register evaluations fail (DevCluster.fail_evaluations)
        self.failing_mode = "plan"  # how they fail (evals.py `fail`)
        self.summaries = SummaryIndex()  # when a write touches the job_summary table (summaryindex.py)
        self.frees = 0  # allocations that ended: with node writes, what unblocks a blocked eval (unblock_token)
        self.rng = random.Random(0)  # the failed follow-up's random wait, the same in every run
        # "default" and "all" always exist; a node's pool is created when the node registers.
        self.node_pools = frozenset({"default", "all", *(node.node_pool for node in cluster.nodes)})
        self.faults = Faults(clock)  # network faults in front of the HTTP app (faults.py)
        self.shared_gpu_ids: set[str] = set()
        self.partitions = Partitions()  # nodes cut off from the servers (partitions.py)
        self.service_registrations: dict[str, JSON] = {}  # native service catalogue by ID (services.py)
        with self.lock:
            if cluster.job_gc_interval_s is not None:
                gc.schedule_periodic(self, cluster.job_gc_interval_s, cluster.job_gc_threshold_s)
            for node in build_nodes(cluster):
                index = self._next_index()
                node.create_index = node.modify_index = index
                node.version = str(nomad_version)
                self.nodes[node.id] = node
                self.shared_gpu_ids.update(node.shared_gpus)
                self._emit(index, [node.event("NodeRegistration")])

    @property
    def nomad_version(self) -> str | NomadVersion:
        """The Nomad release whose behaviour is played; nodes report it as their version."""
        return self._nomad_version

    @nomad_version.setter
    def nomad_version(self, version: str | NomadVersion) -> None:
        with self.lock:
            self._nomad_version = version
            self._short_offers = _short_offers(version)
            for node in self.nodes.values():
                node.version = str(version)

    # -- plumbing ----------------------------------------------------------------------------------

    def _next_index(self) -> int:
        self.index += 1
        return self.index

    def advance_index(self) -> int:
        """One raft index for a write kept outside this state (a Variable, variables.py)."""
        with self.lock:
            return self._next_index()

    def _emit(self, index: int, events: list[Event]) -> float:
        for event in events:  # every write publishes its events: their topics name the tables it wrote
            self.table_index[_TABLES.get(event.topic, event.topic)] = index
            if self.summaries.changes(event):
                self.table_index["job_summary"] = index
        return self.broker.publish(index, events)

    def unblock_token(self) -> tuple[int, int]:
        """Changes when capacity may have freed: an allocation ended or a node was written (what calls
        `BlockedEvals.Unblock`, nomad/blocked_evals.go, v2.0.5)."""
        return self.frees, self.table_index.get("nodes", 0)

    def resolve_node(self, id_or_name: str) -> Node:
        node = self.nodes.get(id_or_name) or next((n for n in self.nodes.values() if n.name == id_or_name), None)
        if node is None:
            raise NotFound("node not found")
        return node

    def job_allocs(self, key: tuple[str, str], create_index: int | None = None) -> list[Alloc]:
        """Allocations of a job, optionally only those of one incarnation (CreateIndex)."""
        return [a for a in self.by_job.get(key, []) if create_index is None or a.job_create_index == create_index]

    def live_allocs(self, key: tuple[str, str], create_index: int) -> list[Alloc]:
        return [a for a in self.job_allocs(key, create_index) if a.live]

    # -- jobs --------------------------------------------------------------------------------------

    def register(self, raw_job: JSON, submission: JSON | None, namespace: str,
                 options: RegisterOptions | None = None) -> JSON:
        """`Job.Register` (`nomad/job_endpoint.go`, v2.0.5): validate, check `EnforceIndex`, and
        upsert the job only when its spec changed; every register creates an evaluation."""
        now = self.clock()
        job = canonicalize({**raw_job, "Namespace": namespace})  # the caller resolved it (register_namespace)
        admission = admission_errors(job, self.namespaces, self.node_pools)
        validate(job, admission + maxrun.admit(job, self.nomad_version))  # JobValidationError -> 500
        asks = group_asks(job)
        with self.lock:
            key = (job["Namespace"], job["ID"])
            old = self.jobs.get(key)
            if options is not None and options.enforce_index:
                enforce_index(old.job if old else None, options.job_modify_index)  # RegisterConflict -> 500
            self.register_log.setdefault(key, []).append(now)
            index = self._next_index()
            events = []
            if old is not None and not spec_changed(old.job, job):
                record, warnings, job_index = old, "", old.job["ModifyIndex"]
            else:
                stamp_version(job, old.job if old else None, index, now)
                record = JobRecord(job, asks, dict(old.submissions) if old else {}, now)
                warnings = "" if submission is None else record.keep_submission(job["Version"], submission)
                self.jobs[key] = record
                events.append(job_event("JobRegistered", job, index))
                job_index = index
            evaluation = self._new_eval(record.job, evals.JOB_REGISTER, index)
            self._emit(index, [*events, evaluation.event(index)])
            eval_id = evaluation.id
            self._replan(key, record, eval_id, now)
            if self.failing_evals > 0:  # fault injection: the scheduler gives up on this one
                self.failing_evals -= 1
                evals.fail(self, evaluation, self.failing_mode)
            self._schedule()
            return {"EvalID": eval_id, "EvalCreateIndex": index, "JobModifyIndex": job_index,
                    "Warnings": warnings, "Index": index, "LastContact": 0, "KnownLeader": False}

    def _replan(self, key: tuple[str, str], record: JobRecord, eval_id: str, now: float) -> None:
        """Queue what the new version is missing; stop what it no longer wants."""
        if record.job["Type"] in SYSTEM_TYPES:
            systemjobs.replan(self, key, record, eval_id, now)
            return
        self.pending = [p for p in self.pending if (p.namespace, p.job_id) != key]
        create_index = record.job["CreateIndex"]
        kept: dict[tuple[str, int], Alloc] = {}
        for alloc in self.job_allocs(key, create_index):
            if alloc.desired_status == "run" and (alloc.live or alloc.client_status is ClientStatus.COMPLETE):
                kept[(alloc.task_group, alloc.name_index)] = alloc
        surplus = [a for (group, i), a in kept.items()
                   if a.live and (group not in record.asks or i >= _count(record.job, group))]
        if surplus:
            self._stop_allocs(surplus, "alloc not needed due to job update")
        for group_json in record.job["TaskGroups"]:
            for i in range(group_json["Count"]):
                if (group_json["Name"], i) not in kept:
                    self.pending.append(Pending(key[0], key[1], group_json["Name"], i, eval_id, now))

    def deregister(self, namespace: str, job_id: str, purge: bool) -> JSON:
        with self.lock:
            key = (namespace, job_id)
            record = self.jobs.get(key)
            if record is None:  # a missing job is 200 with empty values (reference section 6)
                return {"EvalID": "", "EvalCreateIndex": 0, "JobModifyIndex": 0, "Index": 0}
            index = self._next_index()
            job = record.job
            # `handleJobDeregister` upserts the stopped job as a new version, whose submission is the one
            # it had (nomad/fsm.go, `upsertJobImpl` in nomad/state/state_store.go, v2.0.5)
            version = job["Version"]
            job.update({"Stop": True, "Version": version + 1, "ModifyIndex": index, "JobModifyIndex": index})
            if version in record.submissions:
                record.submissions[version + 1] = record.submissions[version]
            if purge:
                del self.jobs[key]
            self.pending = [p for p in self.pending if (p.namespace, p.job_id) != key]
            live = self.live_allocs(key, job["CreateIndex"])
            job["Status"] = "dead" if not live else "running"
            evaluation = self._new_eval(job, evals.JOB_DEREGISTER, index)
            self._emit(index, [job_event("JobDeregistered", job, index, deleted=purge), evaluation.event(index)])
            if live:
                self._stop_allocs(live, "alloc not needed since job was stopped")
            self._schedule()
            return {"EvalID": evaluation.id, "EvalCreateIndex": index, "JobModifyIndex": index, "Index": index}

    def stop_alloc(self, alloc_id: str) -> JSON:
        """`/v1/allocation/:id/stop`: AllocationUpdateDesiredStatus, then PlanResult (stop), then
        AllocationUpdated (complete) (reference section 3)."""
        with self.lock:
            alloc = self.allocs.get(alloc_id)
            if alloc is None:
                raise NotFound("allocation not found")
            index = self._next_index()
            alloc.set_desired(alloc.desired_status, alloc.desired_description, index, self.clock(), True)
            evaluation = self._new_eval(alloc.job, evals.ALLOC_STOP, index)
            self._emit(index, [alloc.event("AllocationUpdateDesiredStatus", index), evaluation.event(index)])
            if alloc.live:
                # The reconciler migrates it: stop, and place a replacement, batch jobs included
                # (`scheduler/reconcile.go` v1.10.5; `scheduler/reconciler/reconcile_cluster.go` v2.0.5,
                # where only Reschedule or MigrateDisablePlacement skip the placement).
                self._stop_allocs([alloc], nodeops.STATUS_MIGRATING, migrate=True)
                if self._replaceable(alloc):
                    self._requeue(alloc, evals.ALLOC_STOP, evaluation)
            self._schedule()
            return {"EvalID": evaluation.id, "Index": index}

    def _stop_allocs(self, allocs: list[Alloc], why: str, migrate: bool | None = None) -> None:
        """Desired stop now; each ends `complete` after its kill_timeout (kills.py)."""
        kills.stop(self, allocs, why, migrate)

    # -- placement (scheduling.py) -----------------------------------------------------------------
    _new_eval = scheduling.new_eval
    _track = scheduling.track
    _schedule = scheduling.schedule
    _place_pending = scheduling.place_pending
    _create_alloc = scheduling.create_alloc
    _requeue = scheduling.requeue

    # -- the allocation lifecycle (alloclife.py) ---------------------------------------------------
    on_start = alloclife.on_start
    on_finish = alloclife.on_finish
    _finish = alloclife.finish
    _reschedule_allowed = alloclife.reschedule_allowed

    def _replaceable(self, alloc: Alloc) -> bool:
        """Whether the current version of the alloc's job still wants this slot filled."""
        record = self.jobs.get((alloc.namespace, alloc.job_id))
        return (record is not None and not record.job["Stop"]
                and record.job["CreateIndex"] == alloc.job_create_index
                and alloc.task_group in record.asks
                and alloc.name_index < _count(record.job, alloc.task_group))

    # -- nodes (fault injection; the rules live in nodeops.py) ------------------------------------
    set_node_status = nodeops.set_status
    set_drain = nodeops.set_drain
    set_eligibility = nodeops.set_eligibility


_TABLES = {"Node": "nodes", "Allocation": "allocs", "Job": "jobs", "Evaluation": "evals",
           "Service": "service_registrations"}


def _count(job: JSON, group: str) -> int:
    return next((int(g["Count"]) for g in job["TaskGroups"] if g["Name"] == group), 0)


def _short_offers(version: str | NomadVersion) -> bool:
    return (version if isinstance(version, NomadVersion) else NomadVersion.parse(version)).places_short_device_offers
