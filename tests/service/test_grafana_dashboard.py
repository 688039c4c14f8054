"""docs/grafana-dashboard.json is built on metrics the service really exposes, and is a valid dashboard."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import generate_latest

from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.settings import ServiceSettings

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def exposed(tmp_path: Path) -> tuple[set[str], set[str]]:
    """(families, samples) of a service instance's /metrics, scrape-time families included."""
    runtime = ServiceRuntime(ServiceSettings(nomad=NomadSettings(address="http://127.0.0.1:9"),
                                             db_path=str(tmp_path / "q.db"), listen="http://127.0.0.1:0"))
    try:
        text = generate_latest(runtime.metrics.registry).decode()
        families = {m.name for m in runtime.metrics.registry.collect()}  # labelled ones without series too
    finally:
        runtime.store.close()
    samples = {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines() if line and line[0] != "#"}
    return families, samples


def test_every_metric_the_dashboard_queries_is_exposed(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    families, samples = exposed(tmp_path)
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"nomad_gpu_[a-z_]+", target["expr"])}
    assert {"nomad_gpu_wait_seconds_bucket", "nomad_gpu_gpus", "nomad_gpu_entries",
            "nomad_gpu_event_stream_reconnects_total", "nomad_gpu_nomad_errors_total"} <= queried
    missing = set()
    for name in queried:
        base = next((name[: -len(s)] for s in SUFFIXES if name.endswith(s)), name)
        if name not in samples and base not in families:
            missing.add(name)
    assert missing == set(), f"the dashboard queries metrics the service does not expose: {sorted(missing)}"


def test_panels_are_laid_out_without_overlap() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["uid"] == "nomad-gpu" and len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine
        assert panel["targets"] and all(t["expr"] for t in panel["targets"])
