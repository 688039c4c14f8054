"""Wiring: store + Nomad client + actuator + scheduler + watcher + HTTP API, started in order.

Start-up order matters (DESIGN 3.5): the watcher's first resync reconciles the ledger from Nomad
before the cycle loop admits anything. On PostgreSQL several replicas share the database: each serves
the API, and only the one holding the leader's lease (service/ha/leadership.py) builds and runs what acts on
Nomad, from the database, as a restart does (`_elected`). A standby's API forwards to the leader
(service/ha/standby.py).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from nomad_gpu.domain.errors import InvalidRequest, NomadGpuError
from nomad_gpu.nomad.watcher import Watcher
from nomad_gpu.service.accounting.history import History, HistorySampler
from nomad_gpu.service.accounting.idleaccounts import STORE_KEY as ACCOUNTS_KEY
from nomad_gpu.service.accounting.idleaccounts import IdleAccounts
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.admission.access import LiveTokens
from nomad_gpu.service.admission.nodepools import NamespacePools
from nomad_gpu.service.config.settings import ServiceSettings
from nomad_gpu.service.ha.leadership import LeaseKeeper, NothingStarted, SoleLeader
from nomad_gpu.service.ha.standby import Switch, standby_app
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.listen import ApiServer, plan_listen
from nomad_gpu.service.http.livemetrics import install as install_live_metrics
from nomad_gpu.service.life.actuator import Actuator
from nomad_gpu.service.life.fencing import FencedClient
from nomad_gpu.service.loops.existingjobs import BOTH_FLAGS, check_new_database
from nomad_gpu.service.loops.reclaim import KEEPS_KEY, IdleReclaim
from nomad_gpu.service.loops.reload import reload_config, wait_for_signals
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.service.loops.usage import UsagePoller
from nomad_gpu.service.relayout.config import STORE_KEY as RELAYOUTS_KEY
from nomad_gpu.service.relayout.config import build_loop
from nomad_gpu.service.relayout.loop import RelayoutCollector
from nomad_gpu.store.contract import Store
from nomad_gpu.store.factory import is_postgres, open_store

logger = logging.getLogger(__name__)


SERVICE_KEY = "service_name"


def claim_store(store: Store, service_name: str) -> None:
    """The database is this service's: the first service to open it writes its `service_name`, and another
    service (another `service_name`, pointed at this database by mistake: a DSN copied from the wrong
    deployment) is refused before anything is written, rather than adopting and stopping its jobs."""
    found = store.get_meta(SERVICE_KEY)
    if found is None:
        store.set_meta(SERVICE_KEY, service_name)
    elif found != service_name:
        raise InvalidRequest(f"the queue database belongs to the service {found!r}, not {service_name!r} "
                             "(service_name in the config): point --db at this service's own database")


class ServiceRuntime:
    """The whole service in one process; `start()` returns once the API is listening."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.access = settings.access.with_admin(settings.token)
        # refuse an unsafe listen address before anything is opened or started
        self.listen = plan_listen(settings.listen, token_required=self.access.required, tls_cert=settings.tls_cert,
                                  tls_key=settings.tls_key)
        self.metrics = Metrics()
        self.replicated = is_postgres(settings.db_path)
        """PostgreSQL: one of several replicas, led by a lease; SQLite: the one service on its file."""
        # one service per SQLite file; on PostgreSQL the replicas of one service share the database
        self.store = open_store(settings.db_path, exclusive=not self.replicated, replica=self.replicated)
        try:
            claim_store(self.store, settings.scheduling.service_name)
        except BaseException:
            self.store.close()
            raise
        self.leadership: SoleLeader | LeaseKeeper = SoleLeader()
        if self.replicated:
            from nomad_gpu.store.pglease import PgLease  # psycopg is loaded only for PostgreSQL

            lease = PgLease(getattr(self.store, "location", settings.db_path), settings.scheduling.ha.lease_s, "")
            self.leadership = LeaseKeeper(lease, self.metrics, elected=self._elected, deposed=self._deposed,
                                          regained=self._regained)
        self.client = FencedClient(settings.nomad, writable=self.leadership.writable,
                                   epoch=lambda: self.leadership.epoch if self.leadership.writable() else None)
        self.history = History()
        self.tokens = LiveTokens(self.access)
        """The API's tokens, swapped by `reload()`."""
        self._api: ApiServer | None = None
        self._switch: Switch | None = None
        self.address = settings.listen
        self.deposed = threading.Event()
        """Set when another replica took the lease from this one: the process ends (`serve_until_signalled`)."""
        self.leading = threading.Event()
        """Set once this replica leads and what acts on Nomad is running (at start-up on SQLite)."""
        self.scheduler: SchedulerService
        self.watcher: Watcher
        self.usage: UsagePoller
        self.idle: IdleReclaim
        if not self.replicated:
            self._build()

    def _build(self) -> None:
        """What acts on Nomad, loaded from the database (on PostgreSQL: when this replica is elected)."""
        settings = self.settings
        self.actuator = Actuator(self.client, settings.templates_dir, settings.scheduling.service_name,
                                 local_parse=settings.scheduling.local_parse, epoch=self.client.epoch,
                                 stop_on_client_after=settings.scheduling.stop_on_client_after_s)
        self.scheduler = SchedulerService(self.store, self.actuator, settings.scheduling, self.metrics)
        self.scheduler.relayout = build_loop(  # MIG re-layouts, when the operator turned them on
            settings.scheduling.mig_relayout, self.client, executor=self.scheduler.life.executor,
            clock=self.scheduler.clock, load=lambda: self.store.get_meta(RELAYOUTS_KEY),
            save=lambda value: self.store.set_meta(RELAYOUTS_KEY, value), wake=self.scheduler.wake)
        if self.scheduler.relayout is not None:
            self.metrics.registry.register(RelayoutCollector(self.scheduler.relayout))
        self.watcher = Watcher(self.client, self.scheduler, settings.scheduling.sharing)
        self.scheduler.stream_state = lambda: self.watcher.stream_state
        self.store.space.listen(self.watcher.resync_soon)  # what a full disk kept out is taken in at once
        install_live_metrics(self.metrics, self.scheduler, self.watcher)
        self.usage = UsagePoller(self.client, self.scheduler, settings.scheduling.usage, self.metrics)
        self.idle = IdleReclaim(  # idle reclaim reviews each round of the poller's figures
            self.scheduler, settings.scheduling.idle,
            IdleAccounts(lambda: self.store.get_meta(ACCOUNTS_KEY), lambda v: self.store.set_meta(ACCOUNTS_KEY, v),
                         settings.scheduling.retention_s),
            self.metrics, load=lambda: self.store.get_meta(KEEPS_KEY), save=lambda v: self.store.set_meta(KEEPS_KEY, v))
        self.usage.on_round, self.usage.idle_fields = self.idle.review, self.idle.fields
        self.sampler = HistorySampler(self.history, self.scheduler.status,
                                      lambda: self.metrics.registry.get_sample_value("nomad_gpu_admitted_total") or 0.0)

    def ha_status(self) -> dict[str, Any]:
        return {"role": self.leadership.role, "epoch": self.leadership.epoch,
                "leader": self.leadership.leader_address()}

    def reload(self) -> bool:
        """Read the config file again for its teams and tokens (SIGHUP; service/loops/reload.py)."""
        if not self.leading.is_set():
            logger.warning("a standby reads its config again when it leads (restart it to change its tokens)")
            return False
        done = reload_config(self.settings.config_path, self.scheduler, self.tokens, self.settings.token)
        if done and self._api is not None:  # the connection reserve trusts the same tokens as the gate
            self._api.retrust(tuple(self.tokens.access.tokens))
        return done

    def _leader_app(self) -> Any:
        return create_app(self.scheduler, access=self.access, nomad_address=self.settings.nomad.address,
                          history=self.history, usage=self.usage, nomad=self.client, idle=self.idle,
                          templates=self.actuator.renderer.template_names(),
                          namespace_pools=NamespacePools(self.client.namespace), live_tokens=self.tokens,
                          ha_status=self.ha_status)

    def _check_new_database(self) -> None:
        if self.store.created:  # a lost or replaced database looks like this: are the old one's jobs running?
            check_new_database(self.client, self.actuator, self.settings.scheduling.service_name,
                               ignore=self.settings.ignore_existing_jobs, adopt=self.settings.adopt_existing_jobs)

    def start(self, *, wait_ready_s: float = 0.0) -> str:
        if self.settings.ignore_existing_jobs and self.settings.adopt_existing_jobs:
            raise InvalidRequest(BOTH_FLAGS)
        if self.replicated:
            app = standby_app(self.leadership.leader_address, self.ha_status, self.metrics, self.access, self.tokens)
        else:
            self._check_new_database()
            app = self._leader_app()
        self._switch = Switch(app)
        self._api = ApiServer(self._switch, self.listen, hosts=self.access.hosts, limits=self.access.http,
                              tokens=tuple(self.access.tokens))
        self._api.bind()  # a port in use or a bad TLS key fails here, before anything runs
        if not self.replicated:
            self._start_leading()
        self.address = self._api.serve()
        if isinstance(self.leadership, LeaseKeeper):
            self.leadership.lease.address = self.settings.scheduling.ha.advertise or self.address
            self.leadership.start()
        if wait_ready_s > 0:  # a replica that leads, or the one service on SQLite, has reconciled; a standby not
            began = time.monotonic()
            if self.leading.wait(wait_ready_s):
                self.scheduler.ready.wait(max(0.0, wait_ready_s - (time.monotonic() - began)))
        return self.address

    def _start_leading(self) -> None:
        self.scheduler.start()
        self.watcher.start()
        self.sampler.start()
        self.usage.start()
        self.leading.set()

    # ---- the lease's news (its own thread) -------------------------------------------------------
    def _elected(self, epoch: int) -> None:
        """This replica leads: load the queue and follow Nomad from scratch, as a restart does, then serve
        the leader's API."""
        from nomad_gpu.store.pglease import epoch_check
        from nomad_gpu.store.postgres import PostgresStore

        if isinstance(self.leadership, LeaseKeeper) and isinstance(self.store, PostgresStore):
            lease = self.leadership.lease
            self.store.fence = epoch_check(lambda: lease.epoch)  # from now on every write proves the epoch
        try:
            for attempt in range(3):  # a connection the server ended in an outage fails once, then connects again
                try:
                    self.store.get_meta(SERVICE_KEY)
                    break
                except NomadGpuError:
                    if attempt == 2:
                        raise
            self._build()
        except NomadGpuError as exc:
            raise NothingStarted(str(exc)) from exc
        self._check_new_database()
        self._start_leading()
        if self._switch is not None:
            self._switch.app = self._leader_app()
        logger.warning("leading under epoch %d: the queue is loaded and Nomad followed again", epoch)

    def _regained(self, epoch: int) -> None:
        """The lease ran out while the database was unreachable and is held again with nobody having led in
        between: what Nomad did meanwhile is read again before anything is admitted."""
        if self.leading.is_set():
            self.watcher.resync_soon()

    def _deposed(self, reason: str) -> None:
        """Another replica leads: every record is fenced, nothing more is written to Nomad (the client's
        check refuses it already), and the process ends so that it can only come back as a standby."""
        if self.leading.is_set():
            self.scheduler.life.fence()
        logger.error("this replica was deposed (%s): ending; it comes back as a standby when restarted", reason)
        self.deposed.set()

    def serve_until_signalled(self) -> int:
        """Run until SIGINT or SIGTERM (0), or until this replica is deposed (1)."""
        wait_for_signals(self.reload, until=self.deposed)
        self.stop()
        return 1 if self.deposed.is_set() else 0

    def stop(self) -> None:
        if self.leading.is_set():
            self.sampler.stop()
            self.usage.stop()
            self.watcher.stop()
            self.scheduler.stop()
        self.leadership.stop()  # the lease's session ends: a standby takes over at once
        if self._api is not None:
            self._api.stop()
        self.store.close()
