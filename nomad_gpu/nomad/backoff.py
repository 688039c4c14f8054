"""The watcher's wait before it reconnects: capped exponential, and never quicker than `unreachable_s` after
an error (a Nomad that is down, or a service that cannot store what it hears)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Backoff:
    initial_s: float = 0.05
    max_s: float = 5.0
    current_s: float = 0.0
    unreachable_s: float = 0.5
    """The first retry after Nomad refused or timed out: a stream that ended reconnects at once, a Nomad
    that is down is not knocked on every 50 ms."""

    def next(self) -> float:
        self.current_s = self.initial_s if self.current_s == 0 else min(self.current_s * 2, self.max_s)
        return self.current_s

    def after_error(self) -> float:
        self.current_s = min(max(self.next(), self.unreachable_s), self.max_s)
        return self.current_s

    def reset(self) -> None:
        self.current_s = 0.0
