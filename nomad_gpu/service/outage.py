"""Whether Nomad answers: while it does not, admissions pause and retries back off.

One log line per change of state, never one per failed attempt: with Nomad down, a queue of
hundreds of entries must not turn into a flood of warnings or of requests.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from nomad_gpu.service.metrics import Metrics

logger = logging.getLogger(__name__)


class Outage:
    def __init__(self, clock: Callable[[], float], metrics: Metrics) -> None:
        self.clock = clock
        self.metrics = metrics
        self.since: float | None = None
        self.reason = ""
        self._lock = threading.Lock()

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
        self.metrics.nomad_reachable.set(0)
        logger.warning("Nomad is not answering (%s); admissions paused, retries back off", reason)
        if kind == "forbidden":
            logger.error("Nomad refused the service's token: fix its ACL policy (docs/nomad-acl.md); "
                         "entries keep their place meanwhile")

    def reachable(self) -> None:
        with self._lock:
            if self.since is None:
                return
            lasted = self.clock() - self.since
            self.since, self.reason = None, ""
        self.metrics.nomad_reachable.set(1)
        logger.warning("Nomad answers again after %.1f s; admissions resume", lasted)
