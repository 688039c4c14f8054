"""Repeated log lines, rate-limited: one failing condition must not write gigabytes of the same line.

Out of file descriptors, asyncio logged ``socket.accept() out of system resource`` with a traceback on
every turn of the accept loop: 300,000 times (135 MB) in 40 s. Any line an outsider can trigger at will
(a malformed request, a refused connection) could do the same. The filter here lets the first
``burst`` records of one kind (logger, level, message template) through in each ``window_s``, drops the
rest, and says how many it dropped on the first record of that kind it lets through again. Installed on
the handlers by the entry point (:func:`configure_logging`); libraries only log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
MAX_KINDS = 1000
"""Kinds of line tracked at once (the oldest is forgotten beyond it: the filter's own memory is bounded)."""


@dataclass
class _Kind:
    window_start: float
    passed: int = 0
    dropped: int = 0


class RepeatLimiter(logging.Filter):
    """At most ``burst`` records of one kind per ``window_s`` seconds (``clock`` is monotonic)."""

    def __init__(self, burst: int = 10, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self.clock = clock
        self._kinds: dict[tuple[str, int, str], _Kind] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg).split("\n", 1)[0])  # asyncio's add the socket below
        now = self.clock()
        kind = self._kinds.get(key)
        if kind is None:
            if len(self._kinds) >= MAX_KINDS:
                self._kinds.pop(next(iter(self._kinds)))
            kind = self._kinds[key] = _Kind(now)
        elif now - kind.window_start >= self.window_s:
            dropped = kind.dropped
            kind.window_start, kind.passed, kind.dropped = now, 0, 0
            if dropped:
                record.msg = f"{record.msg} [{dropped} more like this in the last {self.window_s:.0f} s not logged]"
        if kind.passed >= self.burst:
            kind.dropped += 1
            return False
        kind.passed += 1
        return True


def configure_logging(level: int, *, burst: int = 10, window_s: float = 60.0) -> None:
    """The entry point's logging: one format to stderr, repeated lines rate-limited."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RepeatLimiter) for f in handler.filters):
            handler.addFilter(RepeatLimiter(burst, window_s))
