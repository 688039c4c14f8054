"""Whether Nomad answers: while it does not, admissions pause and retries back off.

One log line per change of state, never one per failed attempt: with Nomad down, a queue of
hundreds of entries must not turn into a flood of warnings or of requests.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.life.tracking import backoff_s

logger = logging.getLogger(__name__)


class Outage:
    def __init__(self, clock: Callable[[], float], metrics: Metrics) -> None:
        self.clock = clock
        self.metrics = metrics
        self.since: float | None = None
        self.reason = ""
        self._lock = threading.Lock()
        self._probing = False
        self._probes = 0
        self._next_probe = 0.0

    @property
    def down(self) -> bool:
        return self.since is not None

    def unreachable(self, reason: str, kind: str = "unavailable") -> None:
        """Nomad did not answer (or refused the token, `kind` "forbidden"): pause admissions."""
        self.metrics.nomad_errors.labels(kind).inc()
        with self._lock:
            if self.since is not None:
                return
            self.since, self.reason = self.clock(), reason
            self._probes, self._next_probe = 0, self.since + backoff_s(1)
        self.metrics.nomad_reachable.set(0)
        logger.warning("Nomad is not answering (%s); admissions paused, retries back off", reason)
        if kind == "forbidden":
            logger.error("Nomad refused the service's token: fix its ACL policy (docs/nomad-acl.md); "
                         "entries keep their place meanwhile")

    def probe_due(self, now: float) -> bool:
        """Whether to ask Nomad now if it answers again. An outage must end by itself: the call that began
        it may never be retried (a lost register reply whose job then ran and completed), and with
        admissions paused nothing else may talk to Nomad. One probe at a time, backing off."""
        with self._lock:
            if self.since is None or self._probing or now < self._next_probe:
                return False
            self._probing = True
            return True

    def probed(self, reason: str | None) -> None:
        """A probe's answer: None when Nomad answered, else why not."""
        with self._lock:
            self._probing = False
            if reason is not None:
                self._probes += 1
                self._next_probe = self.clock() + backoff_s(self._probes + 1)
        if reason is None:
            self.reachable()
        else:
            self.metrics.nomad_errors.labels("unavailable").inc()

    def reachable(self) -> None:
        with self._lock:
            if self.since is None:
                return
            lasted = self.clock() - self.since
            self.since, self.reason = None, ""
        self.metrics.nomad_reachable.set(1)
        logger.warning("Nomad answers again after %.1f s; admissions resume", lasted)
