"""Between the scheduling cycle and the MIG re-layout controller: what each tells the other, and when.

The cycle runs under the scheduler's lock and must never wait on Nomad; the controller talks to Nomad
(node JSON with placements, allocations, the apply job). So the two meet here:

- `before_cycle` (under the lock) marks the instances a re-layout is destroying as unusable in the
  ledger's inventory, and restores the ones it marked before once the re-layout is over, so the cycle
  never admits onto an instance about to vanish; a node update from Nomad resets the mark, and the
  next cycle sets it again, before it decides anything;
- `after_cycle` (under the lock) gives the waiting entries' reasons ("waiting for a MIG re-layout of
  GPU 1 on h100-mig-1") and, when due, hands the waiting MIG asks to a worker thread, which reads Nomad
  and moves the controller (`RelayoutController.step`) outside the lock. The worker publishes what
  the cycle reads (held instances, reasons) as immutable snapshots.

New instances need nothing here: the cycle sees them when Nomad's node lists them, like any instance.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import NodeId
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.migplanner import MigAsk, waiting_mig_asks
from nomad_gpu.domain.placement import WaitReason
from nomad_gpu.domain.requests import JobRequest
from nomad_gpu.nomad.client import NomadClient
from nomad_gpu.service.life.tracking import Executor
from nomad_gpu.service.relayout.controller import RelayoutController
from nomad_gpu.service.relayout.port import opted_in_gpus

logger = logging.getLogger(__name__)

RELAYOUT_HELPS = frozenset({WaitReason.NO_SUCH_SHAPE, WaitReason.FRAGMENTED, WaitReason.INSUFFICIENT,
                            WaitReason.CPU_MEMORY})
"""Waits a new instance can end. CPU or memory too: the instance the job fits may sit on a node without
its CPU beside it, while another node has both CPU and a GPU to re-lay (each ask names the nodes with its
CPU and memory free, and the planner re-lays only there). Not quota, a gang, nor capacity reserved for
the head of the queue or held for an entry: those would wait on after a re-layout too."""


class RelayoutLoop:
    def __init__(self, controller: RelayoutController, client: NomadClient, *, executor: Executor,
                 clock: Callable[[], float], interval_s: float = 5.0, extra_nodes: frozenset[str] = frozenset(),
                 extra_gpus: frozenset[str] = frozenset(), wake: Callable[[], None] = lambda: None) -> None:
        self.controller = controller
        self.client = client
        self.executor = executor
        self.clock = clock
        self.interval_s = interval_s
        self.extra_nodes, self.extra_gpus = extra_nodes, extra_gpus
        self.wake = wake
        self._busy = threading.Lock()  # one worker step at a time
        self._last = float("-inf")
        self._held: Mapping[str, frozenset[str]] = controller.held()
        self._reasons: Mapping[str, str] = {}
        self._marked: dict[str, frozenset[str]] = {}
        self._mig_nodes: tuple[str, ...] = ()

    # ---- the cycle's side (under the scheduler's lock) -------------------------------------------
    def before_cycle(self, ledger: Ledger) -> None:
        held = self._held
        nodes = ledger.inventory.nodes
        self._mig_nodes = tuple(n for n, node in nodes.items() if node.migs)
        for node_id in set(held) | set(self._marked):
            node = nodes.get(NodeId(node_id))
            want, had = held.get(node_id, frozenset()), self._marked.get(node_id, frozenset())
            if node is None:
                self._marked.pop(node_id, None)
                continue
            migs = tuple(replace(m, healthy=False) if m.id in want else replace(m, healthy=True) if m.id in had else m
                         for m in node.migs)
            if migs != node.migs:
                ledger.set_node(replace(node, migs=migs))
            self._marked[node_id] = want
            if not want:
                del self._marked[node_id]

    def after_cycle(self, now: float, waiting: Sequence[JobRequest], frees: Iterable[NodeFree]) -> dict[str, str]:
        """Reasons for entries waiting on a re-layout; starts a worker step when one is due. `frees` is
        what each node has free after the cycle: an ask is planned only where its CPU and memory fit."""
        asks = waiting_mig_asks(waiting, frees)
        if (asks or self.controller.in_flight()) and now - self._last >= self.interval_s and self._busy.acquire(False):
            self._last = now
            try:
                self.executor.submit(self._step, asks, self._mig_nodes)
            except RuntimeError:  # the executor is shutting down
                self._busy.release()
        return {str(r.entry): self._reasons[str(r.entry)] for r in waiting if str(r.entry) in self._reasons}

    def status(self) -> dict[str, object]:
        return self.controller.status()

    # ---- the worker's side ---------------------------------------------------------------------
    def _step(self, asks: list[MigAsk], mig_nodes: tuple[str, ...]) -> None:
        try:
            raw_nodes = [self.client.node(n) for n in mig_nodes]
            allocs = self.client.allocations()
            gpus = opted_in_gpus(raw_nodes, allocs, extra_nodes=self.extra_nodes, extra_gpus=self.extra_gpus)
            names = {str(n.get("ID")): str(n.get("Name") or "") for n in raw_nodes}
            before = self.controller.held()
            self.controller.step(self.clock(), gpus, asks, names)
            self._held = self.controller.held()
            index = {g.uuid: k for node in {g.node for g in gpus}
                     for k, g in enumerate(sorted((x for x in gpus if x.node == node), key=lambda x: x.uuid))}
            self._reasons = {a.key: reason for a in asks
                             if (reason := self.controller.waiting_reason(a.key, index)) is not None}
            if before != self._held:
                self.wake()  # held instances changed: the cycle marks or restores them
        except Exception:
            logger.exception("MIG re-layout step failed")
        finally:
            self._busy.release()


class RelayoutCollector:
    """`nomad_gpu_mig_relayouts_total{outcome="started"|"done"|"failed"}` and
    `nomad_gpu_mig_relayouts_in_flight`, read from the controller at scrape time."""

    def __init__(self, loop: RelayoutLoop) -> None:
        self.loop = loop

    def collect(self) -> Iterator[Metric]:
        counts = self.loop.controller.counts
        total = CounterMetricFamily("nomad_gpu_mig_relayouts", "MIG re-layouts by outcome (since start)",
                                    labels=["outcome"])
        for outcome, value in (("started", counts.started), ("done", counts.done), ("failed", counts.failed)):
            total.add_metric([outcome], value)
        yield total
        yield GaugeMetricFamily("nomad_gpu_mig_relayouts_in_flight", "MIG re-layouts in flight",
                                value=len(self.loop.controller.in_flight()))
