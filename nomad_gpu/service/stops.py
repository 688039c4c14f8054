"""How an ended attempt's Nomad job is stopped, and when its capacity goes back to the ledger.

A stop is an intent stored with the attempt's end (`store.stops`), sent from the executor outside the
service lock, retried with backoff until Nomad confirms (across restarts too). A draining attempt's
GPUs are released only once its job is stopped, no register for it is in flight, and every allocation
Nomad made for it is terminal, so a replacement can never land on GPUs given to the next job.

A mixin of `Lifecycle` (service/lifecycle.py), which alone moves entries: the attributes below are
the life cycle's, named here so this part reads on its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.nomad.client import NomadError
from nomad_gpu.nomad.decode import AllocInfo
from nomad_gpu.service.actuator import NomadActuator
from nomad_gpu.service.outage import Outage
from nomad_gpu.service.tracking import Draining, Executor, backoff_s
from nomad_gpu.store.contract import StopIntent, Store

logger = logging.getLogger("nomad_gpu.service.lifecycle")


class Stops:
    store: Store
    ledger: Ledger
    actuator: NomadActuator
    lock: threading.RLock
    executor: Executor
    outage: Outage
    draining: dict[str, Draining]
    inflight: set[str]

    clock: Callable[[], float]
    wake: Callable[[], None]

    def maybe_release(self, d: Draining) -> bool:
        if d.stopped and not d.register_in_flight and all(a.is_terminal for a in d.allocs.values()):
            del self.draining[d.job_id]
            if self.ledger.release(d.key) is not None:
                self.wake()
                return True
        return False

    def start_stop(self, job_id: str, namespace: str) -> None:
        key = f"stop:{namespace}/{job_id}"
        if key not in self.inflight:
            self.inflight.add(key)
            self.executor.submit(self._stop, job_id, namespace)

    def _stop(self, job_id: str, namespace: str) -> None:
        """Executor: stop a job; when its capacity is draining, read back its allocations too."""
        with self.lock:
            confirm = job_id in self.draining
        allocs: tuple[AllocInfo, ...] = ()
        try:
            self.actuator.stop(job_id, namespace)
            if confirm:
                state = self.actuator.job_state(job_id, namespace)
                allocs = state.allocs if state is not None else ()
        except NomadError as exc:
            with self.lock:
                self.inflight.discard(f"stop:{namespace}/{job_id}")
                intent = next((s for s in self.store.stops() if s.job_id == job_id and s.namespace == namespace), None)
                tries = (intent.attempts if intent else 0) + 1
                self.store.stop_retry(job_id, namespace, self.clock() + backoff_s(tries))
                if exc.retryable:
                    self.outage.unreachable(str(exc))
                logger.debug("stop %s failed (%s); retrying", job_id, exc)
            return
        with self.lock:
            self.inflight.discard(f"stop:{namespace}/{job_id}")
            self.outage.reachable()
            self.store.stop_done(job_id, namespace)
            d = self.draining.get(job_id)
            if d is not None:
                d.stopped = True
                for a in allocs:
                    d.allocs.setdefault(a.id, a)
                self.maybe_release(d)

    def _stop_orphan(self, a: AllocInfo) -> None:
        """A job of this database that no live entry claims (it ended, or the entry is gone): stop it."""
        if not any(s.job_id == a.job_id for s in self.store.stops()):
            now = self.clock()
            self.store.add_stop(StopIntent(a.job_id, a.namespace, "no live entry claims it", now, 0, now))
        self.start_stop(a.job_id, a.namespace)
