"""The service's side of MIG re-layouts: start them through Nomad, see them through, or roll them back.

The planner (domain/migplanner.py) says which GPU to re-lay for the waiting asks. This controller owns
what happens next, one record per re-layout, moved by one method (`step`) that is safe to repeat:

    applying ──job complete──► fingerprint ──Nomad's node shows the layout──► done
        │                           │
        └── job failed / lost / too slow, node down ──► failed (reason; the GPU backs off, doubling)

- at most one re-layout in flight per node; a GPU is not re-laid again within the cool-down;
- while one is in flight, the instances it destroys are held: the cycle must not place onto them
  (`held()`), and the asks it serves wait with "waiting for a MIG re-layout of GPU ... on ..."
  (`waiting_reason`);
- the new instances are used only once Nomad's node lists them (the plugin fingerprinted them and the
  client re-registered); until then the cycle does not know them, so it cannot admit onto them;
- records are kept in the store (one JSON value), so a restarted service finds a re-layout in flight,
  asks Nomad how its job ended and finishes or rolls it back; it never starts a second one on that node.

I/O goes through `RelayoutPort` (Nomad, in production `NomadRelayoutPort`), so tests drive it with fakes
and a fake clock.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from nomad_gpu.domain.ids import NodeId
from nomad_gpu.domain.migplanner import MigAsk, MigGpu, PlanSettings, plan
from nomad_gpu.service.relayout.applyjob import apply_job_id

logger = logging.getLogger(__name__)

STORE_KEY = "mig_relayouts"


class Phase(StrEnum):
    APPLYING = "applying"
    FINGERPRINT = "fingerprint"
    DONE = "done"
    FAILED = "failed"

    def is_terminal(self) -> bool:
        return self in (Phase.DONE, Phase.FAILED)


@dataclass(frozen=True)
class Record:
    node: str
    node_name: str
    gpu: str
    job_id: str
    layout: str
    expect_idle: tuple[str, ...]
    admits: tuple[str, ...]
    started_at: float
    phase: Phase = Phase.APPLYING
    applied_at: float | None = None
    ended_at: float | None = None
    reason: str = ""

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["phase"] = self.phase.value
        out["expect_idle"], out["admits"] = list(self.expect_idle), list(self.admits)
        return out

    @staticmethod
    def from_json(raw: dict[str, Any]) -> Record:
        data = dict(raw)
        data["phase"] = Phase(str(data["phase"]))
        data["expect_idle"] = tuple(str(i) for i in data.get("expect_idle") or ())
        data["admits"] = tuple(str(i) for i in data.get("admits") or ())
        return Record(**data)


class RelayoutPort(Protocol):
    def register_apply(self, record: Record) -> None:
        """Register the apply job (create-only: a repeat after a lost reply changes nothing)."""

    def apply_status(self, record: Record) -> str | None:
        """The apply job's allocation's client status (`complete`, `failed`, `lost`, `running`,
        `pending`), or None when Nomad has none yet."""

    def node_layout(self, node: str) -> tuple[str, dict[str, list[str]]] | None:
        """(node status, GPU -> `profile@start` items) as Nomad's node shows them now; None if gone."""

    def stop(self, record: Record) -> None:
        """Stop the apply job (rolled back or done: it must not run again)."""


@dataclass(frozen=True)
class RelayoutSettings:
    enabled: bool = True
    cool_down_s: float = 600.0
    job_timeout_s: float = 300.0
    """The apply job must end this long after it was registered."""
    fingerprint_timeout_s: float = 120.0
    """Nomad's node must show the new layout this long after the job ended (plugin period + node update)."""
    backoff_s: float = 60.0
    backoff_max_s: float = 3600.0
    admit_grace_s: float = 60.0
    """After a re-layout is done, its asks are left to the cycle this long (it admits them onto the new
    instances) before another re-layout may be planned for them."""
    default_profiles: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class Counts:
    started: int = 0
    done: int = 0
    failed: int = 0


class RelayoutController:
    def __init__(self, port: RelayoutPort, settings: RelayoutSettings, *, load: Callable[[], str | None],
                 save: Callable[[str], None]) -> None:
        self.port = port
        self.settings = settings
        self._save = save
        self._records: list[Record] = []
        """Moved by `step` only (one worker at a time); readers see `_snap`, published whole after each step."""
        self.last_relayout_at: dict[str, float] = {}
        self.backoff_until: dict[str, float] = {}
        self.failures: dict[str, int] = {}
        self._counts = Counts()
        self._serial = 0
        raw = load()
        if raw:
            state = json.loads(raw)
            self._records = [Record.from_json(r) for r in state.get("records", [])]
            self.last_relayout_at = dict(state.get("last_relayout_at", {}))
            self.backoff_until = dict(state.get("backoff_until", {}))
            self.failures = dict(state.get("failures", {}))
            self._serial = int(state.get("serial", 0))
        self._snap: tuple[tuple[Record, ...], Counts] = (tuple(self._records), replace(self._counts))

    @property
    def records(self) -> list[Record]:
        return list(self._snap[0])

    @property
    def counts(self) -> Counts:
        return self._snap[1]

    # ---- what the cycle reads ------------------------------------------------------------------
    def in_flight(self) -> list[Record]:
        return [r for r in self._snap[0] if not r.phase.is_terminal()]

    def held(self) -> dict[str, frozenset[str]]:  # (from the published snapshot, via in_flight)
        """Node ID -> instances the cycle must not place onto (they are being destroyed)."""
        out: dict[str, frozenset[str]] = {}
        for r in self.in_flight():
            out[r.node] = out.get(r.node, frozenset()) | frozenset(r.expect_idle)
        return out

    def waiting_reason(self, entry: str, gpu_index: dict[str, int] | None = None) -> str | None:
        for r in self.in_flight():
            if entry in r.admits:
                label = f"GPU {gpu_index[r.gpu]}" if gpu_index and r.gpu in gpu_index else r.gpu
                return f"waiting for a MIG re-layout of {label} on {r.node_name or r.node}"
        return None

    def status(self) -> dict[str, object]:
        records, counts = self._snap
        return {"in_flight": [r.to_json() for r in records if not r.phase.is_terminal()],
                "failed": [r.to_json() for r in records if r.phase is Phase.FAILED][-20:],
                "counts": asdict(counts)}

    # ---- the one mover -------------------------------------------------------------------------
    def step(self, now: float, gpus: Sequence[MigGpu], asks: Sequence[MigAsk],
             names: dict[str, str] | None = None) -> list[Record]:
        """Advance the re-layouts in flight, then start the ones the planner chooses. Returns those started."""
        changed = False
        touched: set[NodeId] = set()
        for k, r in enumerate(self._records):
            if not r.phase.is_terminal():
                moved = self._advance(r, now)
                if moved != r:
                    self._records[k], changed = moved, True
                    touched.add(NodeId(r.node))  # the view of it the caller read predates this
        served = {a for r in self._records if r.phase is Phase.DONE
                  and now - (r.ended_at or now) < self.settings.admit_grace_s for a in r.admits}
        asks = [a for a in asks if a.key not in served]
        started: list[Record] = []
        if self.settings.enabled and asks:
            busy_nodes = {NodeId(r.node) for r in self._records if not r.phase.is_terminal()} | touched
            usable = [replace(g, last_relayout_at=self.last_relayout_at.get(g.uuid)) for g in gpus
                      if self.backoff_until.get(g.uuid, 0.0) <= now]
            settings = PlanSettings(cool_down_s=self.settings.cool_down_s,
                                    default_profiles=self.settings.default_profiles)
            for relayout in plan(usable, asks, now=now, settings=settings, busy_nodes=busy_nodes):
                self._serial += 1
                record = Record(relayout.node, (names or {}).get(relayout.node, ""), relayout.gpu,
                                apply_job_id(relayout.node, relayout.gpu, self._serial), relayout.layout,
                                relayout.destroy, relayout.admits, now)
                self._records.append(record)
                self._persist()  # the intent is durable before Nomad hears of it
                try:
                    self.port.register_apply(record)
                except Exception as exc:  # Nomad refused or is unreachable: roll back at once
                    logger.warning("MIG re-layout of %s on %s: register failed: %s", record.gpu, record.node, exc)
                    self._records[-1] = self._fail(record, now, f"apply job not registered: {exc}")
                    continue
                self._counts.started += 1
                started.append(record)
                logger.info("MIG re-layout of %s on %s to %s for %s", record.gpu, record.node, record.layout,
                            ", ".join(record.admits))
            changed = changed or bool(started)
        if changed:
            self._records = self._records[-200:]
            self._persist()
        self._snap = (tuple(self._records), replace(self._counts))
        return started

    def _advance(self, r: Record, now: float) -> Record:
        if r.phase is Phase.APPLYING:
            status = self.port.apply_status(r)
            if status == "complete":
                return replace(r, phase=Phase.FINGERPRINT, applied_at=now)
            if status in ("failed", "lost"):
                return self._fail(r, now, f"apply job {status}")
            seen = self.port.node_layout(r.node)
            if seen is not None and seen[0] == "down":
                return self._fail(r, now, "node down during the re-layout")
            if now - r.started_at > self.settings.job_timeout_s:
                return self._fail(r, now, f"apply job did not end within {self.settings.job_timeout_s:.0f} s")
            return r
        seen = self.port.node_layout(r.node)
        target = sorted(r.layout.split(","))
        if seen is not None and sorted(seen[1].get(r.gpu, [])) == target:
            self._counts.done += 1
            self.last_relayout_at[r.gpu] = now
            self.failures.pop(r.gpu, None)
            self.port.stop(r)
            return replace(r, phase=Phase.DONE, ended_at=now)
        if seen is None or seen[0] == "down":
            return self._fail(r, now, "node down before Nomad saw the new layout")
        if now - (r.applied_at or r.started_at) > self.settings.fingerprint_timeout_s:
            return self._fail(r, now, f"Nomad's node did not show the new layout within "
                                      f"{self.settings.fingerprint_timeout_s:.0f} s")
        return r

    def _fail(self, r: Record, now: float, reason: str) -> Record:
        n = self.failures.get(r.gpu, 0) + 1
        self.failures[r.gpu] = n
        self.backoff_until[r.gpu] = now + min(self.settings.backoff_s * 2 ** (n - 1), self.settings.backoff_max_s)
        self._counts.failed += 1
        logger.warning("MIG re-layout of %s on %s failed: %s", r.gpu, r.node, reason)
        try:
            self.port.stop(r)
        except Exception as exc:  # stopping is best effort: the job never restarts or reschedules anyway
            logger.info("stopping %s: %s", r.job_id, exc)
        return replace(r, phase=Phase.FAILED, ended_at=now, reason=f"re-layout failed: {reason}")

    def _persist(self) -> None:
        self._save(json.dumps({"records": [r.to_json() for r in self._records],
                               "last_relayout_at": self.last_relayout_at, "backoff_until": self.backoff_until,
                               "failures": self.failures, "serial": self._serial}, sort_keys=True))
