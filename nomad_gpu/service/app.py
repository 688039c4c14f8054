"""Wiring: store + Nomad client + actuator + scheduler + watcher + HTTP API, started in order.

Start-up order matters (DESIGN 3.5): the watcher's first resync reconciles the ledger from Nomad
before the cycle loop admits anything.
"""

from __future__ import annotations

import logging

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.nomad.client import NomadClient
from nomad_gpu.nomad.watcher import Watcher
from nomad_gpu.service.access import LiveTokens
from nomad_gpu.service.actuator import Actuator
from nomad_gpu.service.api import create_app
from nomad_gpu.service.existingjobs import BOTH_FLAGS, check_new_database
from nomad_gpu.service.history import History, HistorySampler
from nomad_gpu.service.listen import ApiServer, plan_listen
from nomad_gpu.service.livemetrics import install as install_live_metrics
from nomad_gpu.service.metrics import Metrics
from nomad_gpu.service.nodepools import NamespacePools
from nomad_gpu.service.relayoutconfig import STORE_KEY as RELAYOUTS_KEY
from nomad_gpu.service.relayoutconfig import build_loop
from nomad_gpu.service.relayoutloop import RelayoutCollector
from nomad_gpu.service.reload import reload_config
from nomad_gpu.service.scheduler import SchedulerService
from nomad_gpu.service.settings import ServiceSettings
from nomad_gpu.service.usage import UsagePoller
from nomad_gpu.store.contract import Store
from nomad_gpu.store.factory import open_store

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
        self.store = open_store(settings.db_path, exclusive=True)  # one service per database
        try:
            claim_store(self.store, settings.scheduling.service_name)
        except BaseException:
            self.store.close()
            raise
        self.client = NomadClient(settings.nomad)
        self.actuator = Actuator(self.client, settings.templates_dir, settings.scheduling.service_name,
                                 local_parse=settings.scheduling.local_parse,
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
        self.history = History()
        self.usage = UsagePoller(self.client, self.scheduler, settings.scheduling.usage, self.metrics)
        self.sampler = HistorySampler(self.history, self.scheduler.status,
                                      lambda: self.metrics.registry.get_sample_value("nomad_gpu_admitted_total") or 0.0)
        self.tokens = LiveTokens(self.access)
        """The API's tokens, swapped by `reload()`."""
        self._api: ApiServer | None = None
        self.address = settings.listen

    def reload(self) -> bool:
        """Read the config file again for its teams and tokens (SIGHUP; service/reload.py)."""
        done = reload_config(self.settings.config_path, self.scheduler, self.tokens, self.settings.token)
        if done and self._api is not None:  # the connection reserve trusts the same tokens as the gate
            self._api.retrust(tuple(self.tokens.access.tokens))
        return done

    def start(self, *, wait_ready_s: float = 0.0) -> str:
        if self.settings.ignore_existing_jobs and self.settings.adopt_existing_jobs:
            raise InvalidRequest(BOTH_FLAGS)
        if self.store.created:  # a lost or replaced database looks like this: are the old one's jobs running?
            check_new_database(self.client, self.actuator, self.settings.scheduling.service_name,
                               ignore=self.settings.ignore_existing_jobs, adopt=self.settings.adopt_existing_jobs)
        self._api = ApiServer(create_app(self.scheduler, access=self.access, nomad_address=self.settings.nomad.address,
                                         history=self.history, usage=self.usage, nomad=self.client,
                                         templates=self.actuator.renderer.template_names(),
                                         namespace_pools=NamespacePools(self.client.namespace),
                                         live_tokens=self.tokens), self.listen,
                              hosts=self.access.hosts, limits=self.access.http,
                              tokens=tuple(self.access.tokens))
        self._api.bind()  # a port in use or a bad TLS key fails here, before anything runs
        self.scheduler.start()
        self.watcher.start()
        self.sampler.start()
        self.usage.start()
        self.address = self._api.serve()
        if wait_ready_s > 0:
            self.scheduler.ready.wait(wait_ready_s)
        return self.address

    def stop(self) -> None:
        self.sampler.stop()
        self.usage.stop()
        self.watcher.stop()
        self.scheduler.stop()
        if self._api is not None:
            self._api.stop()
        self.store.close()
