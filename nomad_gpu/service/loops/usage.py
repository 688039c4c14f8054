"""Idle GPUs made visible: the device stats of running allocations, per entry, and a count of idle GPUs.

A GPU held by a job that leaves it idle is the waste users complain about most, and nothing else in
the service can see it: the queue knows what was reserved, not what is used. A poller thread reads
Nomad's client allocation stats (`GET /v1/client/allocation/:id/stats`) of every running allocation
of ours, a bounded number per round with a timeout on every read, and keeps per entry the GPU
utilisation and memory in use that the device plugin reports. The API adds them to the entry JSON,
`nomad-gpu queue` flags idle entries, and the gauge `nomad_gpu_idle_gpus{kind}` counts whole GPUs
(kind `gpu`) and MIG instances (kind `mig`) held but idle: utilisation below a threshold for a
configured time, or for MIG (which reports no utilisation) memory in use below a threshold.

Share instances report their whole GPU's figures: an entry's shares are read once per GPU, and a
shared GPU is never called idle on one tenant's behalf. A figure the plugin does not report is
absent, never 0, and a device without figures is never idle.

Idle reclaim (service/loops/reclaim.py) judges an entry as a whole: `all_idle_since` is set only while every
device it holds reports figures below the threshold and every one of its running allocations was read in
the round. A shared GPU would be judged per tenant only from per-process figures, which neither plugin
reports (a share's figures are its whole GPU's): an entry holding a share is never idle for reclaim.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import Gauge

from nomad_gpu.api.payloads import Usage
from nomad_gpu.domain.errors import InvalidInventory
from nomad_gpu.nomad.client import NomadError
from nomad_gpu.nomad.decode import AllocStatus
from nomad_gpu.nomad.stats import DeviceUsage, decode_alloc_stats
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.config.usageconfig import UsageSettings
from nomad_gpu.sharecontract import SHARE_SEP

if TYPE_CHECKING:
    from nomad_gpu.service.loops.scheduler import SchedulerService

logger = logging.getLogger(__name__)

IDLE_KINDS = ("gpu", "mig")


def device_kind(device_id: str) -> str:
    """`mig`, `share` or `gpu`, by the instance ID conventions of both device plugins."""
    if device_id.startswith("MIG-"):
        return "mig"
    return "share" if SHARE_SEP in device_id else "gpu"


@dataclass(frozen=True)
class EntryUsage:
    """What an entry's GPUs report, as of `sampled_at`."""

    utilisation_pct: float | None
    """Mean over its devices that report utilisation."""
    memory_used_mib: float | None
    memory_total_mib: float | None
    idle_gpus: dict[str, int]
    """Idle whole GPUs (`gpu`) and MIG instances (`mig`) it holds."""
    idle_since: float | None
    """Since when its longest-idle device has been below the threshold (set once one is idle)."""
    sampled_at: float
    all_idle_since: float | None = None
    """Since when every device it holds has been below the threshold (None: one is not, or lacks figures)."""

    @property
    def idle(self) -> bool:
        return any(self.idle_gpus.values())

    def to_payload(self) -> Usage:
        def rounded(v: float | None) -> float | None:
            return None if v is None else round(v, 1)

        return Usage(gpu_util_pct=rounded(self.utilisation_pct), gpu_memory_used_mib=rounded(self.memory_used_mib),
                     gpu_memory_total_mib=rounded(self.memory_total_mib), idle=self.idle,
                     idle_gpus=sum(self.idle_gpus.values()), idle_since=self.idle_since, sampled_at=self.sampled_at)

    def to_json(self) -> dict[str, Any]:
        return self.to_payload().to_json()


class UsageBook:
    """Samples in, per-entry usage and idle counts out. No clock of its own, no I/O: `now` is passed in."""

    def __init__(self, settings: UsageSettings) -> None:
        self.settings = settings
        self._below: dict[str, float] = {}  # device -> since when it has been below its threshold
        self._devices: dict[str, set[str]] = {}  # entry -> its devices
        self._entries: dict[str, EntryUsage] = {}
        self._figures: dict[str, dict[str, DeviceUsage]] = {}  # entry -> its devices' last figures

    def get(self, entry_id: str) -> EntryUsage | None:
        return self._entries.get(entry_id)

    def record(self, entry_id: str, usages: Iterable[DeviceUsage], now: float, complete: bool = True) -> EntryUsage:
        """One round's figures of an entry's devices (`complete`: of all its running allocations)."""
        seen: dict[str, DeviceUsage] = {}
        for u in usages:
            kind = device_kind(u.device_id)
            key = u.device_id.rpartition(SHARE_SEP)[0] if kind == "share" else u.device_id
            seen.setdefault(key, u)  # a GPU's share instances all carry the GPU's figures: once
        idle = dict.fromkeys(IDLE_KINDS, 0)
        since: list[float] = []
        starts: list[float] = []
        whole = complete and bool(seen)
        for key, u in seen.items():
            kind = device_kind(u.device_id)
            if kind == "share" or not self._below_threshold(kind, u):
                self._below.pop(key, None)
                whole = False
                continue
            start = self._below.setdefault(key, now)
            starts.append(start)
            if now - start >= self.settings.idle_after_s:
                idle[kind] += 1
                since.append(start)
        for gone in self._devices.get(entry_id, set()) - set(seen):
            self._below.pop(gone, None)
        self._devices[entry_id] = set(seen)
        self._figures[entry_id] = seen
        utils = [u.utilisation_pct for u in seen.values() if u.utilisation_pct is not None]
        used = [u.memory_used_mib for u in seen.values() if u.memory_used_mib is not None]
        total = [u.memory_total_mib for u in seen.values() if u.memory_total_mib is not None]
        usage = EntryUsage(sum(utils) / len(utils) if utils else None, sum(used) if used else None,
                           sum(total) if total else None, idle, min(since) if since else None, now,
                           max(starts) if whole else None)
        self._entries[entry_id] = usage
        return usage

    def _below_threshold(self, kind: str, u: DeviceUsage) -> bool:
        if kind == "mig":
            return u.memory_used_mib is not None and u.memory_used_mib < self.settings.idle_mig_memory_mib
        return u.utilisation_pct is not None and u.utilisation_pct < self.settings.idle_util_pct

    def retain(self, entry_ids: Collection[str]) -> None:
        """Forget entries that no longer run (and their devices)."""
        for entry_id in [e for e in self._entries.keys() | self._devices.keys() if e not in entry_ids]:
            for device in self._devices.pop(entry_id, set()):
                self._below.pop(device, None)
            self._entries.pop(entry_id, None)
            self._figures.pop(entry_id, None)

    def utilisation(self) -> dict[str, float]:
        """Device -> its last utilisation, for the devices of running entries that report one (a shared GPU
        under its GPU's ID, once)."""
        return {key: u.utilisation_pct for seen in self._figures.values() for key, u in seen.items()
                if u.utilisation_pct is not None}

    def idle_counts(self) -> dict[str, int]:
        out = dict.fromkeys(IDLE_KINDS, 0)
        for usage in self._entries.values():
            for kind, n in usage.idle_gpus.items():
                out[kind] += n
        return out


class StatsSource(Protocol):
    def alloc_stats(self, alloc_id: str, timeout_s: float) -> dict[str, Any]: ...


class UsagePoller:
    """Reads the stats of running allocations on its own thread; every read has a timeout, every round
    a bound (`max_allocs`, least recently read first, and no longer than one interval)."""

    def __init__(self, source: StatsSource, scheduler: SchedulerService, settings: UsageSettings, metrics: Metrics,
                 clock: Callable[[], float] = time.time) -> None:
        self.source = source
        self.scheduler = scheduler
        self.settings = settings
        self.clock = clock
        self.book = UsageBook(settings)
        self._lock = threading.Lock()
        self._read_at: dict[str, float] = {}  # alloc -> when it was last read
        self._failing: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_round: Callable[[float, dict[str, float | None]], object] | None = None
        """Called after each round with each running entry's `all_idle_since` (idle reclaim's review)."""
        self.idle_fields: Callable[[str], dict[str, Any]] | None = None
        """An entry's idle clock for its `usage` (service/loops/reclaim.py `fields`)."""
        self.idle_gauge = Gauge("nomad_gpu_idle_gpus", "Whole GPUs (kind gpu) and MIG instances (kind mig) held "
                                "by running entries but idle", ["kind"], registry=metrics.registry)
        for kind in IDLE_KINDS:
            self.idle_gauge.labels(kind).set(0)

    # ---- reads for the API -------------------------------------------------------------------
    def usage(self, entry_id: str) -> EntryUsage | None:
        with self._lock:
            return self.book.get(entry_id)

    def payload(self, entry_id: str) -> Usage | None:
        """What the entry's `usage` is: None (null) until its allocations have been read; with its idle clock
        where idle reclaim judged it (`idle_fields`)."""
        usage = self.usage(entry_id)
        if usage is None:
            return None
        found = usage.to_payload()
        return replace(found, **self.idle_fields(entry_id)) if self.idle_fields is not None else found

    def utilisation(self) -> dict[str, float]:
        """Each reporting device's utilisation: what a node's `gpu_util_pct` is the mean of."""
        with self._lock:
            return self.book.utilisation()

    def fields(self, entry_id: str) -> dict[str, Any]:
        """What the entry JSON gains: `usage`, null until its allocations have been read."""
        usage = self.payload(entry_id)
        return {"usage": usage.to_json() if usage is not None else None}

    # ---- the rounds --------------------------------------------------------------------------
    def _running(self) -> dict[str, list[str]]:
        """Entry -> its running allocations that hold devices (read under the scheduler's lock)."""
        out: dict[str, list[str]] = {}
        with self.scheduler._lock:
            for entry_id, t in self.scheduler.life.entries.items():
                allocs = [a.id for a in t.allocs.values()
                          if a.client_status is AllocStatus.RUNNING and a.device_ids]
                if allocs:
                    out[entry_id] = sorted(allocs)
        return out

    def poll_once(self) -> int:
        """One round; returns how many allocations were read."""
        running = self._running()
        owner = {alloc: entry for entry, allocs in running.items() for alloc in allocs}
        order = sorted(owner, key=lambda a: (self._read_at.get(a, float("-inf")), a))[: self.settings.max_allocs]
        start = self.clock()
        got: dict[str, list[DeviceUsage]] = {}
        reads: dict[str, int] = {}
        read = 0
        for alloc in order:
            if self._stop.is_set() or (read and self.clock() - start > max(self.settings.interval_s, 1.0)):
                break
            self._read_at[alloc] = self.clock()
            try:
                found = decode_alloc_stats(self.source.alloc_stats(alloc, self.settings.timeout_s))
            except (NomadError, InvalidInventory) as exc:
                if alloc not in self._failing:
                    logger.warning("usage: cannot read the stats of allocation %s: %s", alloc, exc)
                self._failing.add(alloc)
                continue
            self._failing.discard(alloc)
            read += 1
            got.setdefault(owner[alloc], []).extend(found)
            reads[owner[alloc]] = reads.get(owner[alloc], 0) + 1
        now = self.clock()
        with self._lock:
            for entry_id, usages in got.items():
                self.book.record(entry_id, usages, now, complete=reads[entry_id] == len(running[entry_id]))
            self.book.retain(running.keys())
            counts = self.book.idle_counts()
            wholly = {e: u.all_idle_since for e in running if (u := self.book.get(e)) is not None}
        for alloc in [a for a in self._read_at if a not in owner]:
            del self._read_at[alloc]
        self._failing &= owner.keys()
        for kind, n in counts.items():
            self.idle_gauge.labels(kind).set(n)
        if self.on_round is not None:
            self.on_round(now, wholly)
        return read

    def start(self) -> None:
        if self.settings.interval_s <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="usage-poller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.timeout_s + 1.0)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.settings.interval_s):
            try:
                self.poll_once()
            except Exception:  # a bug here must not end the reads for good
                logger.exception("usage: a round of stats reads failed")
