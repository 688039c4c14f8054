"""How an ended attempt's Nomad job is stopped.

A stop is an intent stored with the attempt's end (`store.stops`), sent from the executor outside the
service lock, retried with backoff until Nomad confirms (across restarts too). When the job's attempt is
draining, Nomad's confirmation (with the allocations it lists then) goes back to the life cycle as a
`StopConfirmed` event: only the transition function releases a draining attempt's capacity.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from nomad_gpu.nomad.client import NomadError
from nomad_gpu.nomad.decode import AllocInfo
from nomad_gpu.service.life.actuator import NomadActuator
from nomad_gpu.service.life.outage import Outage
from nomad_gpu.service.life.tracking import Executor, backoff_s
from nomad_gpu.store.contract import StopIntent, Store

logger = logging.getLogger("nomad_gpu.service.life.lifecycle")


class Stops:
    def __init__(self, store: Store, actuator: NomadActuator, *, lock: threading.RLock, executor: Executor,
                 outage: Outage, clock: Callable[[], float], inflight: set[str],
                 draining: Callable[[str], bool], confirmed: Callable[[str, tuple[AllocInfo, ...]], None]) -> None:
        """``draining(job)``: whether the job's capacity waits for the stop (its allocations are then read
        back); ``confirmed(job, allocs)``: called under the lock once Nomad confirmed the stop."""
        self.store, self.actuator, self.lock, self.executor = store, actuator, lock, executor
        self.outage, self.clock, self.inflight = outage, clock, inflight
        self.draining, self.confirmed = draining, confirmed

    def start(self, job_id: str, namespace: str) -> None:
        key = f"stop:{namespace}/{job_id}"
        if key not in self.inflight:
            self.inflight.add(key)
            self.executor.submit(self._stop, job_id, namespace)

    def _stop(self, job_id: str, namespace: str) -> None:
        """Executor: stop a job; when its capacity is draining, read back its allocations too."""
        with self.lock:
            confirm = self.draining(job_id)
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
            self.confirmed(job_id, allocs)

    def orphan(self, a: AllocInfo) -> None:
        """A job of this database that no live entry claims (it ended, or the entry is gone): stop it."""
        if not any(s.job_id == a.job_id for s in self.store.stops()):
            now = self.clock()
            self.store.add_stop(StopIntent(a.job_id, a.namespace, "no live entry claims it", now, 0, now))
        self.start(a.job_id, a.namespace)
