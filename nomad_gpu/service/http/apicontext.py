"""What the API's route modules share: the scheduler, the access rules, and the parts a service may run
without (usage figures, reads from Nomad, idle reclaim, HA), built once by `api.create_app`.

Each route module is a function of this context that returns its routes; an entry is turned into its
wire shape here, once, for every route that answers with entries.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.responses import JSONResponse

from nomad_gpu.api.payloads import Entry, Payload
from nomad_gpu.service.accounting.history import History
from nomad_gpu.service.config.preemptconfig import entry_warnings
from nomad_gpu.service.config.settings import AccessSettings
from nomad_gpu.service.http.addresses import entry_addresses
from nomad_gpu.service.http.jobdetail import NomadReads
from nomad_gpu.service.loops.devicehealth import entry_device_health
from nomad_gpu.service.loops.reclaim import IdleReclaim
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.service.loops.usage import UsagePoller
from nomad_gpu.store import EntryState, QueueEntry
from nomad_gpu.store.contract import TeamQuota


@dataclass(frozen=True)
class ApiContext:
    """``rules``: the access rules with the admin token added; ``quota``: a team's limits as the store
    enforces them; the rest as `api.create_app` documents them."""

    service: SchedulerService
    rules: AccessSettings
    quota: TeamQuota
    history: History = field(default_factory=History)
    usage: UsagePoller | None = None
    nomad: NomadReads | None = None
    nomad_address: str | None = None
    templates: Collection[str] | None = None
    namespace_pools: Callable[[str], str | None] | None = None
    idle: IdleReclaim | None = None
    ha_status: Callable[[], dict[str, Any]] | None = None

    def entry_payload(self, e: QueueEntry) -> Entry:
        """An entry as the API answers it: its stored fields, with its usage, addresses, reason, position in
        the queue, device health and warnings read at the time of the answer."""
        service, usage = self.service, self.usage
        reason = e.reason or (service.pending_reason() if e.state is EntryState.QUEUED else "")
        return replace(e.to_payload(), usage=usage.payload(e.id) if usage is not None else None,
                       addresses=entry_addresses(service, e.id), reason=reason, position=service.position(e),
                       device_health=entry_device_health(service, e),
                       warnings=entry_warnings(e.spec, service.settings.take_back.max_kill_timeout_s))


def answer(payload: Payload, status: int = 200) -> JSONResponse:
    """A typed payload as the JSON answer."""
    return JSONResponse(payload.to_json(), status_code=status)
