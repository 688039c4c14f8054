"""How an admitted attempt is sent to Nomad: create-only, from the executor, outside the service lock.

The stored state is checked first (an attempt cancelled before its turn is never sent); the reply comes
back to the life cycle as an event (`RegisterOk`, `RegisterLost`, `RegisterRefused`, `RegisterDeferred`),
which the transition function applies under the lock. A register in flight is never raced: a stop of its
job waits for this reply (service/life/machine.py).

A register whose pinned device the node now reports unhealthy is withheld: Nomad would block the job and
place it the moment the device heals (nomad/blocked_evals.go v2.0.5), perhaps while the stop sent for it
cannot land (an election). The attempt is refused as Nomad would refuse it (`EvalRefused`: queued again, no
retry used; the node stays a candidate, its sick device is never offered), then its job is stopped, for a
killed process may have sent it already.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.inventory import Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.nomad.client import NomadError, NomadForbidden
from nomad_gpu.render import RenderError
from nomad_gpu.service.asks.classes import resolved
from nomad_gpu.service.asks.translate import placement_from_json, render_placement, spec_of
from nomad_gpu.service.life.actuator import NomadActuator
from nomad_gpu.service.life.events import (
    EvalRefused,
    Event,
    RegisterDeferred,
    RegisterLost,
    RegisterOk,
    RegisterRefused,
)
from nomad_gpu.service.life.outage import Outage
from nomad_gpu.service.life.tracking import Executor, Tracked
from nomad_gpu.store import EntryState, QueueEntry
from nomad_gpu.store.contract import Store


class Registrar:
    def __init__(self, store: Store, ledger: Ledger, actuator: NomadActuator, *, lock: threading.RLock,
                 executor: Executor, outage: Outage, inflight: set[str], entries: dict[str, Tracked],
                 reply: Callable[[QueueEntry, Event], None]) -> None:
        """``entries``: the life cycle's followed entries (read here); ``reply(attempt, event)``: called under
        the lock with the register's outcome."""
        self.store, self.ledger, self.actuator, self.lock, self.executor = store, ledger, actuator, lock, executor
        self.outage, self.inflight, self.entries, self.reply = outage, inflight, entries, reply

    def start(self, t: Tracked) -> None:
        key = f"register:{t.entry.id}"
        if key in self.inflight or t.spec is None:
            return
        self.inflight.add(key)
        self.executor.submit(self._register, t.entry)

    def done(self, entry_id: str) -> None:
        self.inflight.discard(f"register:{entry_id}")

    def _register(self, admitted: QueueEntry) -> None:
        """Executor: register one attempt (create-only), then hand the reply back under the lock."""
        with self.lock:
            t = self.entries.get(admitted.id)
            if (t is None or t.entry.state is not EntryState.ADMITTED or t.entry.attempts != admitted.attempts
                    or t.spec is None):
                self.reply(admitted, RegisterRefused(admitted.attempts))  # never sent: nothing to stop
                return
            if self.outage.down and t.failures == 0:
                # admitted just before the pause, still in the pool when another register met the outage
                # (a burst of a cycle's admissions into one second of it): it waits, pins kept, until
                # Nomad answers again; a register that failed itself retries on its own backoff
                self.reply(admitted, RegisterDeferred(admitted.attempts))
                return
            entry, held = t.entry, (None if t.lean else t.spec)
            if (sick := self.sick_pins(entry)) is not None:
                self.reply(admitted, EvalRefused(sick, avoid=False))  # the ledger offers no sick device anyway
                self.reply(admitted, RegisterDeferred(admitted.attempts))  # never sent now: its stop may go
                return
            first = self.ledger.node_free(NodeId(str(entry.placements[0]["node"]))) if entry.placements else None
            pool = first.node.node_pool if first is not None else None
            devices = [InstanceId(i) for p in entry.placements for i in p.get("instance_ids") or ()]
            vendor = (first.node.vendor_of(devices[0]) if first is not None and devices else None) or "nvidia"
        event: Event = RegisterOk(entry.attempts)
        try:
            # a spec held lean (without env/args) is read whole from the store; one held whole is used as it is
            spec = held if held is not None else spec_of(self.store.get(entry.id))
            placements = [placement_from_json(p) for p in entry.placements]
            spec = resolved(spec, placements)  # a class's choice written in as the kind it chose
            self.actuator.submit(entry, spec, render_placement(spec, placements, pool, vendor))
        except NomadError as exc:
            event = (RegisterLost(entry.attempts, str(exc), isinstance(exc, NomadForbidden)) if exc.retryable
                     else RegisterRefused(entry.attempts, str(exc)))
        except (RenderError, InvalidRequest) as exc:
            event = RegisterRefused(entry.attempts, str(exc))
        with self.lock:
            self.reply(entry, event)

    def sick_pins(self, entry: QueueEntry) -> str | None:
        """Why the attempt's pins cannot be placed now (a pinned device reported unhealthy), or None."""
        for p in entry.placements:
            free = self.ledger.node_free(NodeId(str(p["node"])))
            sick = _unhealthy(free.node) if free is not None else {}
            for i in p.get("instance_ids") or ():
                if i in sick:
                    return f"its pinned device {i} is unhealthy ({sick[i] or 'no reason given'})"
        return None


def _unhealthy(node: Node) -> dict[str, str]:
    """The node's devices its plugin reports unhealthy (GPUs with their share instances, MIG instances)."""
    out = {str(i): g.health for g in node.gpus if not g.healthy for i in (g.id, *g.share_ids)}
    return out | {str(m.id): m.health for m in node.migs if not m.healthy}
