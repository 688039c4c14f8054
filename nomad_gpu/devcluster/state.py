"""The dev cluster's single source of truth: nodes, jobs, allocations, the raft index and the ledger.

Every write takes one lock, advances the raft index (one counter shared by all writes, as in Nomad)
and publishes its events before the lock is released, so the event stream is a faithful, ordered
log of the state. Writes come from HTTP handlers, the embedding API (fault injection) and the timer
thread (tasks starting and finishing). Reads live in `queries.py`.

Nomad behaviour kept here (reference sections 3, 6 and 8):
- a register places what is missing and nothing else: an allocation of the same job that is live or
  `complete` is never placed again, so a repeated register never starts a second copy;
- what does not fit stays queued (a blocked eval) and is retried whenever capacity frees;
- terminal allocations release their devices at once; `lost` ones are replaced, `failed` ones are
  rescheduled per the group's reschedule policy (immediately: delays are not simulated).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable

from . import evals, gc, kills, maxrun, migjobs, namespaces, nodeops, restarts, services, systemjobs
from .allocs import Alloc, ClientStatus
from .clienttruth import Partitions, cut_off, exits_unheard
from .config import ClusterSpec
from .election import Election
from .evals import Evaluation
from .events import Event, EventBroker
from .faults import Faults
from .inventory import Node, build_nodes
from .jobs import JSON, SYSTEM_TYPES, GroupAsk, canonicalize, group_asks, job_event, stamp_version, validate
from .ledger import DeviceLedger
from .passviews import PassViews, place_in_pass
from .placement import DeviceChoice
from .ports import AllocatedPort
from .records import JobRecord, NotFound, Pending
from .register import RegisterOptions, admission_errors, enforce_index, spec_changed
from .runner import TimerHeap
from .summaryindex import SummaryIndex
from .version import DEFAULT_NOMAD_VERSION, NomadVersion

logger = logging.getLogger(__name__)

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

    # -- placement ---------------------------------------------------------------------------------

    def _new_eval(self, job: JSON, trigger: str, index: int, node_id: str = "") -> Evaluation:
        """A pending evaluation for a job; `_schedule` settles it (complete, or complete + blocked)."""
        evaluation = Evaluation(str(uuid.uuid4()), job["Namespace"], job["ID"], job["Type"], job["Priority"],
                                trigger, job["JobModifyIndex"], index, self.clock(), node_id=node_id)
        self._track(evaluation)
        return evaluation

    def _track(self, evaluation: Evaluation) -> None:
        self.evals[evaluation.id] = evaluation
        self.evals_by_job.setdefault((evaluation.namespace, evaluation.job_id), []).append(evaluation.id)
        self.open_evals.add(evaluation.id)

    def _schedule(self) -> None:
        """Try every queued placement in arrival order; emit one PlanResult frame per job; then
        settle the evaluations."""
        try:
            self._place_pending()
        finally:
            evals.settle(self)

    def _place_pending(self) -> None:
        if not self.pending:
            return
        views = PassViews(self.nodes, self.live_by_node)
        short_offers = self._short_offers
        plans: dict[tuple[str, str], tuple[int, list[Alloc]]] = {}
        waiting: list[Pending] = []
        now = self.clock()
        for item in self.pending:
            record = self.jobs.get((item.namespace, item.job_id))
            if record is None or record.job["Stop"] or item.group not in record.asks:
                continue
            if item.not_before > now:  # a failed evaluation's follow-up, not due yet (evals.py `fail`)
                waiting.append(item)
                continue
            if item.blocked_at is not None and item.blocked_at == self.unblock_token():
                waiting.append(item)  # a max-plan-attempts blocked eval: nothing has unblocked it yet
                continue
            ask = record.asks[item.group]
            victims: list[Alloc] = []
            if item.node_id:  # a system job's, for its node, preempting as Nomad does (systemjobs.py)
                verdict, victims = systemjobs.place_on_node(self, item, ask, record.job["Priority"], views,
                                                            short_offers)
            else:
                verdict = place_in_pass(ask, views, self.nodes, self.ledger.is_free, short_offers=short_offers)
            if verdict.placement is None:
                item.reasons = verdict.reasons
                item.metric = evals.alloc_metric(verdict.evaluated, verdict.in_pool, verdict.available,
                                                 verdict.filtered, verdict.exhausted, 0)
                # the audit counts pins someone asked for while held; a replacement Nomad itself made (a
                # migration, a reschedule) waiting for its predecessor's kill_timeout is Nomad's own wait
                if verdict.pinned_held and not item.refusal_counted and not item.previous_alloc:
                    item.refusal_counted = True
                    self.ledger.count_refusal({"job_id": item.job_id, "task_group": item.group,
                                               "at": self.clock(), "reasons": dict(verdict.reasons)})
                    logger.warning("refused to double-book devices for %s/%s: %s",
                                   item.job_id, item.group, verdict.reasons)
                waiting.append(item)
                continue
            key = (item.namespace, item.job_id)
            if key not in plans:
                plans[key] = (self._next_index(), [])
            index, placed = plans[key]
            alloc = self._create_alloc(item, record, ask, verdict.placement.node, verdict.placement.devices, index,
                                       verdict.placement.ports)
            placed.append(alloc)
            placed += systemjobs.evict(self, alloc, victims, index) if victims else []
            views.placed(alloc.node_id, ask, len(alloc.device_ids), alloc.ports)
        self.pending = waiting
        # New placements arrive as `PlanResult`; `AllocationCreated` is never emitted (reference section 1).
        for index, placed in sorted(plans.values(), key=lambda plan: plan[0]):
            self._emit(index, [alloc.event("PlanResult", index) for alloc in placed])
            for alloc in placed:
                self.timers.call_soon(functools.partial(self.on_start, alloc.id))

    def _create_alloc(self, item: Pending, record: JobRecord, ask: GroupAsk, node: Node,
                      devices: tuple[DeviceChoice, ...], index: int, ports: tuple[AllocatedPort, ...] = ()) -> Alloc:
        now = self.clock()
        alloc = Alloc(
            id=str(uuid.uuid4()), eval_id=item.eval_id, namespace=item.namespace, job_id=item.job_id,
            job_type=ask.job_type, job_version=record.job["Version"],
            job_create_index=record.job["CreateIndex"], job=record.job, task_group=item.group,
            name_index=item.name_index, node_id=node.id, node_name=node.name, tasks=ask.tasks,
            devices=devices, duration_s=ask.duration_s, fails=ask.fails, create_index=index,
            registered_at=record.registered_at, created_at=now, previous_allocation=item.previous_alloc,
            restart=ask.restart, restart_window_start=now * self.speed,
            ports=ports, network=ask.network, node_address=node.address,
        )
        self.ledger.hold(alloc.id, alloc.device_ids)
        share_gpu = next((i for i in ask.visible_devices() if i in self.shared_gpu_ids), None)
        # A shared GPU used without a declared share takes all of its time (advisory sharing), and
        # share instances the time of their slots (the project plugin's, held above like any device).
        milli = 1000 if ask.share_milli is None else ask.share_milli
        for choice in devices:
            held = choice.group.share_hold(choice.ids)
            if held is not None:
                share_gpu, milli = held[0], max(ask.share_milli or 0, held[1])
        if share_gpu is not None:
            alloc.share_gpu, alloc.share_milli = share_gpu, ask.share_milli
            if self.ledger.add_share(alloc.id, share_gpu, milli):
                logger.warning("shared GPU %s is oversubscribed (%d milli) by %s", share_gpu,
                               self.ledger.share_sum(share_gpu), alloc.name)
        if item.previous_alloc in self.allocs:
            self.allocs[item.previous_alloc].next_allocation = alloc.id
        self.allocs[alloc.id] = self.live[alloc.id] = alloc
        self.live_by_node.setdefault(alloc.node_id, {})[alloc.id] = alloc
        self.by_job.setdefault((alloc.namespace, alloc.job_id), []).append(alloc)
        maxrun.arm(self, alloc)
        return alloc

    def _requeue(self, alloc: Alloc, trigger: str, evaluation: Evaluation | None = None) -> None:
        """Queue a replacement for `alloc` under an evaluation (the caller checked `_replaceable`)."""
        if evaluation is None:
            job = self.jobs[(alloc.namespace, alloc.job_id)].job
            evaluation = self._new_eval(job, trigger, self.index, node_id=alloc.node_id)
        self.pending.append(Pending(alloc.namespace, alloc.job_id, alloc.task_group, alloc.name_index,
                                    evaluation.id, self.clock(), previous_alloc=alloc.id,
                                    node_id=alloc.node_id if alloc.job_type in SYSTEM_TYPES else ""))

    # -- the allocation lifecycle ------------------------------------------------------------------

    def on_start(self, alloc_id: str) -> None:
        with self.lock:
            alloc = self.allocs.get(alloc_id)
            if alloc is None or alloc.client_status is not ClientStatus.PENDING:
                return  # stopped or lost before it started
            if any(self.allocs[v].live for v in alloc.preempted_allocations or ()) \
                    or cut_off(self, alloc.node_id):
                return  # its victims are still being killed (systemjobs.py), or its node is cut off
            index = self._next_index()
            now = self.clock()
            alloc.move(ClientStatus.RUNNING, index, now)
            self._emit(index, [alloc.event("AllocationUpdated", index)])
            services.on_running(self, alloc)
            end = now + alloc.duration_s / self.speed
            self.timers.call_at(end, functools.partial(self.on_finish, alloc_id))

    def on_finish(self, alloc_id: str) -> None:
        """The task exits by itself; Nomad's restart tracker says what follows (restarts.py): a
        service job's task that exits 0 is restarted or, with `attempts = 0`, fails its allocation."""
        with self.lock:
            if exits_unheard(self, alloc_id):
                return  # the servers cannot hear it end: reported when its node reconnects (partitions.py)
            alloc = self.allocs.get(alloc_id)
            if alloc is None or alloc.client_status is not ClientStatus.RUNNING or alloc.desired_status != "run":
                return  # gone, or being killed (kills.py ends it)
            code = migjobs.task_exit(self, alloc, 1 if alloc.fails else 0)  # a `node mig apply` acts here
            now = self.clock()
            decision = restarts.decide(alloc.restart or restarts.RestartPolicy(0, 0.0, 0.0, "fail"), alloc.job_type,
                                       code, alloc.restart_count, alloc.restart_window_start, now * self.speed)
            alloc.restart_count, alloc.restart_window_start = decision.count, decision.window_start
            if decision.verdict is restarts.Verdict.RESTARTING:
                index = self._next_index()
                alloc.move(ClientStatus.PENDING, index, now, exit_code=code,
                           restart_reason=restarts.restarting_message(decision))
                self._emit(index, [alloc.event("AllocationUpdated", index)])
                self.timers.call_at(now + decision.delay_s / self.speed, functools.partial(self.on_start, alloc_id))
                return
            failed = decision.verdict is restarts.Verdict.NOT_RESTARTING
            self._finish([alloc], ClientStatus.FAILED if failed else ClientStatus.COMPLETE, exit_code=code,
                         restart_reason=decision.reason)
            if failed and self._replaceable(alloc) and self._reschedule_allowed(alloc):
                self._requeue(alloc, evals.ALLOC_FAILURE)
            self._schedule()

    def _finish(self, allocs: list[Alloc], status: ClientStatus, detail: str = "", *, exit_code: int | None = None,
                restart_reason: str = "") -> None:
        """Move allocations to a terminal status in one frame, release their devices, and record
        when the terminal frame was handed to the stream."""
        index = self._next_index()
        now = self.clock()
        for alloc in allocs:
            alloc.move(status, index, now, detail, exit_code=exit_code, restart_reason=restart_reason)
            self.ledger.release(alloc.id)
            self.frees += 1
            del self.live[alloc.id]
            del self.live_by_node[alloc.node_id][alloc.id]
        handed = self._emit(index, [alloc.event("AllocationUpdated", index) for alloc in allocs])
        for alloc in allocs:
            alloc.terminal_event_at = handed
        services.on_stopped(self, {alloc.id for alloc in allocs})
        nodeops.settle_drains(self, {alloc.node_id for alloc in allocs})

    def _replaceable(self, alloc: Alloc) -> bool:
        """Whether the current version of the alloc's job still wants this slot filled."""
        record = self.jobs.get((alloc.namespace, alloc.job_id))
        return (record is not None and not record.job["Stop"]
                and record.job["CreateIndex"] == alloc.job_create_index
                and alloc.task_group in record.asks
                and alloc.name_index < _count(record.job, alloc.task_group))

    def _reschedule_allowed(self, alloc: Alloc) -> bool:
        ask = self.jobs[(alloc.namespace, alloc.job_id)].asks[alloc.task_group]
        failures = 0
        cursor: Alloc | None = alloc
        while cursor is not None:
            failures += cursor.client_status is ClientStatus.FAILED
            cursor = self.allocs.get(cursor.previous_allocation)
        return ask.reschedule_unlimited or failures <= ask.reschedule_attempts

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
