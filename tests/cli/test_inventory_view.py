"""`nomad-gpu inventory`: per node with GPU-equivalents free; `--devices` per device, its use and holder."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner

from nomad_gpu.cli import main as cli_main
from nomad_gpu.cli.inventoryview import device_rows, free_equivalents, node_row

NODE: dict[str, Any] = {
    "id": "n-1", "name": "h100-mig-1", "status": "ready", "schedulable": True, "cpu_mhz": 96000, "cpu_free": 90000,
    "memory_mb": 1024, "memory_free": 512,
    "gpus": [{"id": "GPU-a", "model": "NVIDIA H100 80GB HBM3", "mode": "whole", "healthy": True, "free_milli": 1000,
              "holders": []},
             {"id": "GPU-b", "model": "NVIDIA H100 80GB HBM3", "mode": "whole", "healthy": True, "free_milli": 0,
              "holders": [{"entry": "q000007", "team": "vision", "milli": 1000}]},
             {"id": "GPU-s", "model": "NVIDIA L40S", "mode": "shared", "healthy": True, "free_milli": 500,
              "holders": [{"entry": "q000009", "team": "nlp", "milli": 500}]}],
    "migs": [{"id": "MIG-1", "device": "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "profile": "3g.40gb", "healthy": True,
              "free": True, "holders": []},
             {"id": "MIG-2", "device": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "profile": "1g.10gb", "healthy": True,
              "free": False, "holders": [{"entry": None, "team": "another team", "milli": 1000}]}],
}


def test_free_capacity_in_gpu_equivalents() -> None:
    assert abs(free_equivalents(NODE) - (1 + 0.5 + 3 / 7)) < 1e-9
    assert node_row(NODE) == ("h100-mig-1", "ready", "1/2", "1/2", "500/1000m", "1.93", "90/96", "0/1")


def test_each_device_with_its_use_and_holder() -> None:
    rows = {r[1]: r for r in device_rows(NODE)}
    assert rows["GPU-b"][4:] == ("used", "q000007")
    assert rows["GPU-s"][2:] == ("shared", "L40S", "500/1000m", "q000009 (500m)")
    assert rows["MIG-1"][2] == "mig 3g.40gb ###...." and rows["MIG-1"][4] == "free"
    assert rows["MIG-2"][4:] == ("used", "another team")


def test_the_command(monkeypatch: Any) -> None:
    class FakeClient:
        def inventory(self) -> list[dict[str, Any]]:
            return [NODE]

    monkeypatch.setattr(cli_main, "_client", FakeClient)
    out = CliRunner().invoke(cli_main.main, ["inventory", "--devices"])
    assert out.exit_code == 0 and "q000007" in out.stdout and "###...." in out.stdout
    assert "GPU-EQ FREE" in CliRunner().invoke(cli_main.main, ["inventory"]).stdout
