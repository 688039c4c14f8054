"""Nomad evaluation JSON -> what the service reads of it: whether Nomad could not place a job, and why.

Apart from decode.py (nodes and allocations) because evaluations are their own stream topic and the
service asks of them one question only (reference section 8).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EvalInfo:
    """An evaluation, as far as it says that Nomad could not place a job (reference section 8)."""

    id: str
    job_id: str
    namespace: str
    status: str
    triggered_by: str
    failures: str = ""
    """Nomad's own reasons, one line per task group; empty when every allocation was placed."""

    @property
    def refused(self) -> bool:
        return bool(self.failures) or self.status in ("blocked", "failed")


def decode_eval(raw: Mapping[str, Any]) -> EvalInfo:
    failures: list[str] = []
    for group, metric in sorted((raw.get("FailedTGAllocs") or {}).items()):
        metric = metric or {}
        why = [f"{k} ({v})" for k, v in sorted((metric.get("ConstraintFiltered") or {}).items())]
        why += [f"{k} exhausted ({v})" for k, v in sorted((metric.get("DimensionExhausted") or {}).items())]
        evaluated = int(metric.get("NodesEvaluated") or 0)
        failures.append(f"group {group}: {evaluated} node(s) evaluated" + (f"; {', '.join(why)}" if why else ""))
    if raw.get("Status") == "failed":  # the scheduler gave up ("maximum attempts reached (N)": scheduler/util.go
        failures.append(f"evaluation failed: {raw.get('StatusDescription') or 'no reason given'}")  # v2.0.5)
    return EvalInfo(id=str(raw.get("ID") or ""), job_id=str(raw.get("JobID") or ""),
                    namespace=str(raw.get("Namespace") or "default"), status=str(raw.get("Status") or ""),
                    triggered_by=str(raw.get("TriggeredBy") or ""), failures="; ".join(failures))
