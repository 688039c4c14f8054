"""`nomad-gpu inventory`'s models table: each short name the views print beside the exact name to write."""

from __future__ import annotations

from test_inventory_view import NODE

from nomad_gpu.api.payloads import NodeView
from nomad_gpu.cli.modelsview import model_rows


def test_each_model_short_and_full_with_its_counts() -> None:
    other = NodeView.from_json({"id": "n-2", "name": "a100-1", "gpus": [
        {"id": f"GPU-{k}", "model": "NVIDIA A100-SXM4-80GB", "mode": "whole", "free_milli": 1000} for k in range(8)]})
    assert model_rows([NODE, other]) == [
        ("A100", "NVIDIA A100-SXM4-80GB", 1, 8, 0, 0),
        ("H100", "NVIDIA H100 80GB HBM3", 1, 2, 0, 2),
        ("L40S", "NVIDIA L40S", 1, 0, 1, 0),
    ]


def test_no_gpus_no_rows() -> None:
    assert model_rows([NodeView.from_json({"id": "cpu", "name": "cpu-1"})]) == []
