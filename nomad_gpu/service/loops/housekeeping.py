"""What the scheduler does between cycles besides deciding: retention of finished entries, the heartbeat a
restart measures a wall-clock step against, and the write-ahead log's checkpoint.

Kept apart from the cycle so that each is a small piece with its own clock: retention on the wall clock
(`retention_s` is an age), the heartbeat on the steady clock (the downtime of one boot).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.loops.eligible import SweepLimits
from nomad_gpu.store.contract import Store

logger = logging.getLogger("nomad_gpu.service.loops.scheduler")  # its lines read as the scheduler's, as before

CHECKPOINT_EVERY_S = 300.0
"""How often the store's write-ahead log is checkpointed and truncated."""
HEARTBEAT_S = 30.0
"""How often the service stores its wall and steady time (what a restart measures a clock step against)."""
WALL_STEP_TOLERANCE_S = 60.0
"""A wall-clock step while the service was down smaller than this is taken as noise."""


def boot_id() -> str:
    """This boot of the machine (the steady clock runs on only within one); empty when unknown."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


class Housekeeping:
    """``settings`` is read at each round (a config reload replaces the scheduler's)."""

    def __init__(self, store: Store, settings: Callable[[], SchedulingSettings], lock: threading.RLock,
                 sweep_limits: SweepLimits, clock: Callable[[], float], steady: Callable[[], float]) -> None:
        self.store = store
        self.settings = settings
        self.lock = lock
        self.sweep_limits = sweep_limits
        self.clock = clock
        self.steady = steady
        self._last_beat: float | None = None
        self._last_checkpoint: float | None = None
        self._last_purge = 0.0

    def run(self) -> None:
        """Retention, the heartbeat every HEARTBEAT_S, and the write-ahead log checkpointed every
        CHECKPOINT_EVERY_S."""
        self.purge_finished()
        if self._last_beat is None or self.steady() - self._last_beat >= HEARTBEAT_S:
            self._last_beat = self.steady()
            self.store.set_meta("alive", json.dumps({"wall": self.clock(), "steady": self._last_beat,
                                                     "boot": boot_id()}))
        now = self.clock()
        if self._last_checkpoint is None or now - self._last_checkpoint >= CHECKPOINT_EVERY_S:
            self._last_checkpoint = now
            self.store.checkpoint()

    def wall_step_while_down(self) -> float:
        """How far the wall clock moved beyond the time the service was down, from the last heartbeat: the
        steady clock of the same boot measures the downtime. A step beyond WALL_STEP_TOLERANCE_S is logged,
        and timers do not count it; 0 when it cannot be measured (another boot, no heartbeat)."""
        try:
            beat = json.loads(self.store.get_meta("alive") or "{}")
            wall, steady, boot = float(beat["wall"]), float(beat["steady"]), str(beat["boot"])
        except (ValueError, KeyError, TypeError):
            return 0.0
        down = self.steady() - steady
        if not boot or boot != boot_id() or down < 0:
            return 0.0
        step = (self.clock() - wall) - down
        if abs(step) <= WALL_STEP_TOLERANCE_S:
            return 0.0
        logger.warning("the wall clock moved %.0f s more than the %.0f s the service was down (a clock step): "
                       "timers count the measured time, not the step", step, down)
        return step

    def purge_finished(self, every_s: float = 600.0) -> int:
        """Retention: delete entries that finished more than `retention_s` ago (at most every `every_s`),
        and forget the parallelism limits of sweeps that have no entry left."""
        now = self.clock()
        retention_s = self.settings().retention_s
        if retention_s <= 0 or now - self._last_purge < every_s:
            return 0
        self._last_purge = now
        with self.lock:
            removed = self.store.purge_finished(before=now - retention_s)
            self.sweep_limits.forget_gone()  # a team's oldest sweeps may also have gone to keep its history bounded
        if removed:
            logger.info("retention: %d finished entries older than %.0f s deleted", removed, retention_s)
        return removed
