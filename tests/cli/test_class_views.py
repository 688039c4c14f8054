"""What `status`, `queue` and `queue --wide` show for an entry whose workload class chose the kind."""

from __future__ import annotations

from nomad_gpu.api.payloads import Entry, Placement
from nomad_gpu.cli.entryview import status_lines
from nomad_gpu.cli.queueview import queue_row, request_of

CHOICE = "serving -> MIG 3g.40gb on h100-mig-1: needs 14 GiB; isolated; tier 1"
SPEC = {"name": "chat", "class": "serving", "groups": [{"name": "main", "gpu_memory": "14GiB", "count": 1}]}


def entry(**kw: object) -> Entry:
    placed = Placement("main", 0, "n-mig", 1000, 1024, ("MIG-1",), "NVIDIA H100 80GB HBM3 MIG 3g.40gb", 0, 3 / 7,
                       None, choice=CHOICE)
    base: dict[str, object] = {"id": "q000001", "name": "chat", "team": "t", "state": "running", "spec": SPEC,
                               "placements": (placed,)}
    return Entry(**{**base, **kw})  # type: ignore[arg-type]


def test_the_request_column_says_the_class_and_size_not_cpu_only() -> None:
    assert request_of(entry(placements=())) == "serving 14GiB"
    sweep_trial = {"name": "s-t0", "groups": [{"name": "main", "gpu_memory": 8}]}
    assert request_of(entry(spec=sweep_trial, placements=())) == "hpo 8"
    assert request_of(entry(spec={"name": "c", "groups": [{"name": "main"}]}, placements=())) == "cpu only"


def test_status_shows_the_choice() -> None:
    lines = status_lines(entry(), None, None, {"n-mig": "h100-mig-1"})
    assert ("choice", CHOICE) in lines


def test_queue_wide_explains_the_choice_and_a_waiting_entry_its_reason() -> None:
    row = queue_row(entry(), {"n-mig": "h100-mig-1"}, now=0.0, wide=True)
    assert row[-2] == f"{CHOICE} [h100-mig-1: MIG-1]"
    narrow = queue_row(entry(), {"n-mig": "h100-mig-1"}, now=0.0)
    assert CHOICE not in narrow[-2]
    reason = "serving: no isolated option with >= 14 GiB free; 3 shares free"
    waiting = queue_row(entry(state="queued", placements=(), reason=reason), {}, now=0.0, wide=True)
    assert waiting[-2] == reason


def test_render_says_a_class_chooses_the_kind_at_admission() -> None:
    from pathlib import Path

    from click.testing import CliRunner

    from nomad_gpu.cli.main import main

    spec = Path(__file__).resolve().parents[2] / "jobspecs" / "class-serving.yaml"
    result = CliRunner().invoke(main, ["render", str(spec)])
    assert result.exit_code == 0
    assert ("note: groups[main]: its class (serving) chooses whole GPU, MIG or share at admission; this preview "
            "has no device block") in result.stderr
