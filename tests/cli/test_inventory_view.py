"""`nomad-gpu inventory`: per node with GPU-equivalents free, each MIG GPU as a picture of its slices;
`--devices` per device, its use and holder."""

from __future__ import annotations

import io
import json
from typing import Any

from click.testing import CliRunner
from rich.console import Console

from nomad_gpu.api.payloads import NodeView
from nomad_gpu.cli import connect
from nomad_gpu.cli import main as cli_main
from nomad_gpu.cli.inventoryview import MIG_COLUMNS, device_rows, free_equivalents, mig_picture, mig_rows, node_row
from nomad_gpu.cli.output import table

NODE = NodeView.from_json({
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
})


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
        def inventory(self) -> list[NodeView]:
            return [NODE]

    monkeypatch.setattr(connect, "client", FakeClient)
    out = CliRunner().invoke(cli_main.main, ["inventory", "--devices"])
    assert out.exit_code == 0 and "q000007" in out.stdout and "###...." in out.stdout
    assert "GPU-EQ FREE" in CliRunner().invoke(cli_main.main, ["inventory"]).stdout


MIG_NODE = NodeView.from_json({
    "id": "n-2", "name": "h100-mig-1", "status": "ready", "schedulable": True,
    "migs": [{"id": "MIG-1", "device": "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "profile": "3g.40gb", "healthy": True,
              "free": False, "holders": [{"entry": "q000003", "team": "vision", "milli": 1000}],
              "pci_bus_id": "00000000:47:00.0", "compute_slices": 3},
             {"id": "MIG-2", "device": "NVIDIA H100 80GB HBM3 MIG 2g.20gb", "profile": "2g.20gb", "healthy": True,
              "free": False, "holders": [{"entry": "q000007", "team": "nlp", "milli": 1000}],
              "pci_bus_id": "00000000:47:00.0", "compute_slices": 2},
             {"id": "MIG-3", "device": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "profile": "1g.10gb", "healthy": True,
              "free": True, "holders": [], "pci_bus_id": "00000000:47:00.0", "compute_slices": 1},
             {"id": "MIG-4", "device": "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "profile": "3g.40gb", "healthy": False,
              "free": False, "holders": [], "pci_bus_id": "00000000:57:00.0", "compute_slices": 3},
             {"id": "MIG-5", "device": "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "profile": "3g.40gb", "healthy": True,
              "free": False, "holders": [{"entry": "q000003", "team": "vision", "milli": 1000}],
              "pci_bus_id": "00000000:57:00.0", "compute_slices": 3},
             {"id": "MIG-9", "device": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "profile": "1g.10gb", "healthy": True,
              "free": True, "holders": []}],
    "mig_gpus": [{"pci_bus_id": "00000000:47:00.0", "model": "NVIDIA H100 80GB HBM3", "slices": 7, "used_slices": 5,
                  "free_slices": 1, "instances": ["MIG-1", "MIG-2", "MIG-3"]},
                 {"pci_bus_id": "00000000:57:00.0", "model": "NVIDIA H100 80GB HBM3", "slices": 7, "used_slices": 3,
                  "free_slices": 0, "instances": ["MIG-4", "MIG-5"]}],
})


def test_a_mig_gpu_is_drawn_as_its_slices_with_who_holds_them() -> None:
    first, second = MIG_NODE.mig_gpus
    assert mig_picture(first, MIG_NODE.migs) == ("[aaa|bb|.|-]", "a q000003, b q000007")
    assert mig_picture(second, MIG_NODE.migs) == ("[xxx|aaa|-]", "a q000003")


def test_the_mig_rows_per_physical_gpu() -> None:
    assert mig_rows(MIG_NODE) == [
        ("h100-mig-1", "00000000:47:00.0", "H100", "[aaa|bb|.|-]", "1/7", "a q000003, b q000007"),
        ("h100-mig-1", "00000000:57:00.0", "H100", "[xxx|aaa|-]", "0/7", "a q000003")]


def test_devices_lead_each_mig_gpu_with_its_picture_and_list_ungrouped_instances_as_before() -> None:
    rows = device_rows(MIG_NODE)
    assert [r[1] for r in rows] == ["00000000:47:00.0", "MIG-1", "MIG-2", "MIG-3", "00000000:57:00.0", "MIG-4",
                                    "MIG-5", "MIG-9"]
    assert rows[0][2:] == ("mig [aaa|bb|.|-]", "H100", "1/7 free", "a q000003, b q000007")
    assert rows[-1][2:] == ("mig 1g.10gb #......", "H100", "free", "")


def test_the_command_shows_the_mig_table_only_where_there_are_mig_gpus(monkeypatch: Any) -> None:
    nodes = [NODE]

    class FakeClient:
        def inventory(self) -> list[NodeView]:
            return nodes

    monkeypatch.setattr(connect, "client", FakeClient)
    assert "SLICES" not in CliRunner().invoke(cli_main.main, ["inventory"]).stdout
    nodes = [NODE, MIG_NODE]
    out = CliRunner().invoke(cli_main.main, ["inventory"]).stdout
    assert "GPU (PCI BUS)\tMODEL\tSLICES" in out and "[aaa|bb|.|-]\t1/7\ta q000003, b q000007" in out
    as_json = json.loads(CliRunner().invoke(cli_main.main, ["inventory", "--json"]).stdout)
    assert as_json[1]["mig_gpus"][0]["instances"] == ["MIG-1", "MIG-2", "MIG-3"]
    assert as_json[1]["migs"][0]["pci_bus_id"] == "00000000:47:00.0"


def test_on_a_terminal_the_picture_is_text_not_markup() -> None:
    buf = io.StringIO()
    table(None, MIG_COLUMNS, mig_rows(MIG_NODE), out=Console(file=buf, width=100, force_terminal=True,
                                                              color_system=None))
    assert "[aaa|bb|.|-]" in buf.getvalue() and "[xxx|aaa|-]" in buf.getvalue()
