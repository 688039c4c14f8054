"""`nomad-gpu node inventory`: with a (fake) GPU node, without a driver, and with bad input."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from nomad_gpu.cli.main import main


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_inventory_json_on_a_mig_node() -> None:
    code, out, _ = run("node", "inventory", "--json", "--fake-nvml", "h100-mig")
    assert code == 0
    doc = json.loads(out)
    assert doc["available"] is True
    assert [m["profile"] for m in doc["gpus"][0]["migs"]] == ["2g.20gb", "1g.10gb", "1g.10gb", "3g.40gb"]
    assert doc["gpus"][0]["utilisation_gpu_pct"] is None


def test_inventory_table_names_every_gpu() -> None:
    code, out, _ = run("node", "inventory", "--fake-nvml", "a800x8")
    assert code == 0 and out.count("A800") >= 8 and "NVSwitch" in out


def test_inventory_without_a_driver_is_one_line_and_exit_0() -> None:
    code, out, _ = run("node", "inventory", "--fake-nvml", "no-driver")
    assert (code, out.strip()) == (0, "no NVIDIA driver on this node (libnvidia-ml.so.1 not found)")
    code, out, _ = run("node", "inventory", "--json", "--fake-nvml", "no-driver")
    assert code == 0 and json.loads(out) == {"available": False, "reason": "no_library",
                                             "message": "no NVIDIA driver on this node (libnvidia-ml.so.1 not found)"}


def test_inventory_from_a_json_layout(tmp_path: Path) -> None:
    layout = tmp_path / "node.json"
    layout.write_text(json.dumps({"layout": "a800x8", "lost": [2]}))
    code, out, _ = run("node", "inventory", "--json", "--fake-nvml", str(layout))
    assert code == 0 and [g["lost"] for g in json.loads(out)["gpus"]].count(True) == 1


def test_bad_layout_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    for source in ("nope", str(bad)):
        code, _, err = run("node", "inventory", "--fake-nvml", source)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
