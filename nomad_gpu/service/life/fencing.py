"""Fencing: no write reaches Nomad from a replica that may no longer lead (DESIGN 18).

Nomad takes no fencing token, so the check is ours and sits at the last step before the socket: every
call that changes Nomad's state (register, stop, stop an allocation) asks the leadership whether the lease
is still valid on this replica's monotonic clock, once as it is called and again in the transport, after its
body was built, as its bytes leave (store/pglease.py stops it at lease minus a margin,
before a standby may take over). A refused write is `NomadUnavailable`: to the life cycle it is an
outage (the entry keeps its pins, admissions pause, nothing is marked failed), which is what it is for
this replica. The outage probe is fenced too, so a replica without the lease never sees Nomad "back".

Every job registered carries the epoch of the leader that registered it, in its meta (`nomad_gpu_epoch`,
a decimal string): the renderer writes it into the HCL and the Job JSON (service/life/actuator.py,
service/relayout/applyjob.py), and a register here stamps the Job JSON again with the epoch the check passed
under, so no job leaves without it. A register already on the wire when a leader was paused can still
land after another took over: harmless, because a register is create-only on a job ID fixed by entry
and attempt, and a new leader reads Nomad (the resync) before it moves any attempt on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import requests
from requests.adapters import BaseAdapter
from requests.models import PreparedRequest, Response

from nomad_gpu import __version__
from nomad_gpu.nomad.client import NomadClient, NomadUnavailable
from nomad_gpu.nomad.connection import NomadSettings

META_EPOCH = "nomad_gpu_epoch"
_READS = ("GET", "HEAD")


class _FencedAdapter(BaseAdapter):
    """The last check, after the request's body was built and just before its bytes go: a leader paused
    between the first check and here finds its lease run out when it resumes, and sends nothing."""

    def __init__(self, inner: BaseAdapter, fence: Callable[[str], None]) -> None:
        super().__init__()
        self.inner, self.fence = inner, fence

    def send(self, request: PreparedRequest, *args: Any, **kwargs: Any) -> Response:
        path = request.path_url or ""
        if request.method not in _READS and not path.startswith("/v1/jobs/parse"):  # a parse changes nothing
            self.fence(f"{request.method} {path.split('?')[0]}")
        return self.inner.send(request, *args, **kwargs)

    def close(self) -> None:
        self.inner.close()


class FencedClient(NomadClient):
    """`NomadClient` whose writes pass the leader's check first."""

    def __init__(self, settings: NomadSettings, session: requests.Session | None = None, *,
                 writable: Callable[[], bool] = lambda: True,
                 epoch: Callable[[], int | None] = lambda: None) -> None:
        super().__init__(settings, session)
        # which process sent a write, for Nomad's logs and the dev cluster's audit (a replica's pid)
        self.session.headers["User-Agent"] = f"nomad-gpu/{__version__} (pid {os.getpid()})"
        for prefix, adapter in list(self.session.adapters.items()):  # checked again as the request leaves
            self.session.mount(prefix, _FencedAdapter(adapter, self._fence))
        self.writable = writable
        self.epoch = epoch

    def _fence(self, what: str) -> None:
        if not self.writable():
            raise NomadUnavailable(f"{what}: this replica does not hold the leader's lease (or it is running "
                                   "out): nothing is written to Nomad")

    def leader(self) -> str:
        self._fence("probe Nomad")
        return super().leader()

    def register(self, job: Mapping[str, Any], hcl: str, *, create_only: bool = False,
                 namespace: str | None = None) -> dict[str, Any]:
        epoch = self.epoch()
        self._fence(f"register job {job.get('ID')}")
        if epoch is not None:
            job = {**job, "Meta": {**(job.get("Meta") or {}), META_EPOCH: str(epoch)}}
        return super().register(job, hcl, create_only=create_only, namespace=namespace)

    def deregister(self, job_id: str, purge: bool = False, namespace: str | None = None) -> None:
        self._fence(f"stop job {job_id}")
        super().deregister(job_id, purge=purge, namespace=namespace)

    def stop_alloc(self, alloc_id: str) -> None:
        self._fence(f"stop allocation {alloc_id}")
        super().stop_alloc(alloc_id)
