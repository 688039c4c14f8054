"""The metrics read from the running service at scrape time, and the feed of the wait-time histogram.

- `nomad_gpu_gpus{kind,model,profile,state}`: capacity by kind, free or in use. Whole GPUs and MIG
  instances count one each; shared GPUs count in GPU-equivalents (milli-GPU / 1000, DESIGN 3.3), so a
  GPU half taken by shares reads 0.5 used and 0.5 free. Unhealthy devices are `state="unhealthy"`.
- `nomad_gpu_entries{state}`: the entries the scheduler tracks (queued, held, admitted, running); how
  entries ended is `nomad_gpu_finished_total{outcome}`.
- `nomad_gpu_event_stream_reconnects_total`: how often the watcher had to reopen Nomad's event stream.
- `nomad_gpu_event_stream_forbidden`: 1 while Nomad refuses the service's token the event stream.
- `nomad_gpu_wait_seconds` is observed by the life cycle as each admission is committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from nomad_gpu.nomad.watcher import Watcher
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.http.views import service_inventory
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, QueueEntry

logger = logging.getLogger(__name__)

Key = tuple[str, str, str, str]  # kind, model, profile, state


def capacity(nodes: Sequence[Mapping[str, Any]]) -> dict[Key, float]:
    """(kind, model, profile, state) -> count, from the inventory view (`GET /v1/inventory`'s nodes)."""
    out: dict[Key, float] = {}

    def add(key: Key, value: float) -> None:
        out[key] = out.get(key, 0.0) + value

    for node in nodes:
        for g in node.get("gpus") or []:
            model, free = str(g.get("model") or ""), int(g.get("free_milli") or 0)
            if g.get("mode") == "shared":
                if not g.get("healthy", True):
                    add(("share", model, "", "unhealthy"), 1.0)
                    continue
                add(("share", model, "", "free"), free / 1000)
                add(("share", model, "", "used"), (1000 - free) / 1000)
            else:
                state = "unhealthy" if not g.get("healthy", True) else ("free" if free >= 1000 else "used")
                add(("whole", model, "", state), 1.0)
        for m in node.get("migs") or []:
            device = str(m.get("device") or "")
            model = device.split(" MIG ")[0]
            state = "unhealthy" if not m.get("healthy", True) else ("free" if m.get("free") else "used")
            add(("mig", model, str(m.get("profile") or ""), state), 1.0)
    return out


def capacity_reader(inventory: Callable[[], list[dict[str, Any]]]) -> Callable[[], Iterator[Metric]]:
    def read() -> Iterator[Metric]:
        family = GaugeMetricFamily("nomad_gpu_gpus", "GPU capacity by kind (whole, mig, share), model, MIG profile "
                                   "and state (free, used, unhealthy); shares in GPU-equivalents",
                                   labels=["kind", "model", "profile", "state"])
        for (kind, model, profile, state), value in sorted(capacity(inventory()).items()):
            family.add_metric([kind, model, profile, state], round(value, 6))
        yield family
    return read


def entry_counts(entries: Sequence[QueueEntry]) -> dict[str, int]:
    counts = {"queued": 0, "held": 0, "admitted": 0, "running": 0}
    for e in entries:
        if e.state is EntryState.QUEUED:
            counts["held" if e.held else "queued"] += 1
        elif e.state.value in counts:
            counts[e.state.value] += 1
    return counts


def entries_reader(tracked: Callable[[], list[QueueEntry]]) -> Callable[[], Iterator[Metric]]:
    def read() -> Iterator[Metric]:
        family = GaugeMetricFamily("nomad_gpu_entries", "Entries the scheduler tracks, by state (held: queued "
                                   "but held)", labels=["state"])
        for state, n in entry_counts(tracked()).items():
            family.add_metric([state], n)
        yield family
    return read


def reconnects_reader(count: Callable[[], int]) -> Callable[[], Iterator[Metric]]:
    def read() -> Iterator[Metric]:
        yield CounterMetricFamily("nomad_gpu_event_stream_reconnects", "Times the watcher reopened Nomad's event "
                                  "stream (a break, a close, an error)", value=count())
    return read


def forbidden_reader(state: Callable[[], str]) -> Callable[[], Iterator[Metric]]:
    def read() -> Iterator[Metric]:
        yield GaugeMetricFamily("nomad_gpu_event_stream_forbidden", "1 while Nomad refuses the service's token "
                                "the event stream (a missing read-job or node read capability)",
                                value=1.0 if state() == "forbidden" else 0.0)
    return read


def install(metrics: Metrics, scheduler: SchedulerService, watcher: Watcher) -> None:
    """Read capacity, entries and reconnects from this service at each scrape."""

    def tracked() -> list[QueueEntry]:
        with scheduler._lock:  # reads only, at one instant
            return [t.entry for t in scheduler.life.entries.values()]

    metrics.read_at_scrape(capacity_reader(lambda: service_inventory(scheduler)))
    metrics.read_at_scrape(entries_reader(tracked))
    metrics.read_at_scrape(reconnects_reader(lambda: watcher.reconnects))
    metrics.read_at_scrape(forbidden_reader(lambda: watcher.stream_state))
