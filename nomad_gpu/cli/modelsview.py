"""The models table of `nomad-gpu inventory`: each short name the views print beside the exact name.

Every view prints short model names (`A100`), but a job's `gpu.models` ends up with the fingerprint's
exact name (`NVIDIA A100-SXM4-80GB`); the service resolves an unambiguous short spelling, and this table
shows which exact name each short one stands for, how many GPUs of it there are and how they are offered.
"""

from __future__ import annotations

from collections.abc import Iterable

from nomad_gpu.api.payloads import NodeView
from nomad_gpu.cli.output import Column
from nomad_gpu.domain.modelnames import short_model

MODEL_COLUMNS = (Column("MODEL"), Column("FULL NAME (gpu.models)", shrink=True), Column("NODES", right=True),
                 Column("WHOLE", right=True), Column("SHARED", right=True), Column("MIG INSTANCES", right=True))


def model_rows(nodes: Iterable[NodeView]) -> list[tuple[str, str, int, int, int, int]]:
    """One row per exact model: its short form, the exact name, nodes, whole / shared GPUs, MIG instances."""
    counts: dict[str, list[int]] = {}
    where: dict[str, set[str]] = {}
    for n in nodes:
        for g in n.gpus:
            row = counts.setdefault(g.model, [0, 0, 0])
            row[0 if g.mode == "whole" else 1] += 1
            where.setdefault(g.model, set()).add(n.id)
        for m in n.migs:
            model = m.device.split(" MIG ", 1)[0]
            counts.setdefault(model, [0, 0, 0])[2] += 1
            where.setdefault(model, set()).add(n.id)
    return [(short_model(model), model, len(where[model]), *counts[model])  # type: ignore[misc]
            for model in sorted(counts, key=lambda m: (short_model(m), m))]
