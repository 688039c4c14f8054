"""Repeated log lines are rate-limited (issue 26, item 3): the accept failure once logged 300,000 times in 40 s."""

from __future__ import annotations

import logging

from nomad_gpu.service.loglimit import RepeatLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(msg: str, name: str = "asyncio", level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


def test_a_line_repeated_past_the_burst_is_dropped_and_counted_later() -> None:
    clock = Clock()
    limiter = RepeatLimiter(burst=3, window_s=60.0, clock=clock)
    line = "socket.accept() out of system resource\nsocket: <fd=3>"
    passed = [limiter.filter(record(line)) for _ in range(1000)]
    assert passed.count(True) == 3
    assert limiter.filter(record("another line"))  # other kinds are not held back
    clock.now = 61.0
    again = record(line)
    assert limiter.filter(again)
    assert "[997 more like this in the last 60 s not logged]" in again.getMessage()


def test_kinds_are_told_apart_by_logger_level_and_first_line() -> None:
    limiter = RepeatLimiter(burst=1, window_s=60.0, clock=Clock())
    assert limiter.filter(record("x\nfd=3"))
    assert not limiter.filter(record("x\nfd=4"))  # the same failure on another socket
    assert limiter.filter(record("x", name="uvicorn.error"))
    assert limiter.filter(record("x", level=logging.WARNING))


def test_the_filter_forgets_old_kinds() -> None:
    limiter = RepeatLimiter(burst=1, window_s=60.0, clock=Clock())
    for i in range(5000):
        limiter.filter(record(f"line {i}"))
    assert len(limiter._kinds) <= 1000
