"""Test data shared by the render tests: paths, device names, placements that fit a spec."""

from __future__ import annotations

from pathlib import Path

from nomad_gpu.render import GroupPlacement, JobSpec, RenderPlacement

REPO = Path(__file__).resolve().parents[2]
JOBSPECS = REPO / "jobspecs"
TEMPLATES = REPO / "templates"
A100 = "nvidia/gpu/NVIDIA A100-SXM4-80GB"
A100_MIG = "nvidia/gpu/NVIDIA A100-SXM4-80GB MIG 3g.40gb"
NODE = "5c7d9f0e-1b2a-4c3d-8e9f-0a1b2c3d4e5f"


def placement_for(spec: JobSpec, node_id: str = NODE) -> RenderPlacement:
    """A placement that satisfies ``spec`` exactly, with recognisable fake IDs."""
    groups = []
    for group in spec.groups:
        n = group.device_count * group.count
        if group.gpu is not None:
            ids = tuple(f"GPU-{group.name}-{i:04d}" for i in range(n))
            groups.append(GroupPlacement(group.name, A100, ids))
        elif group.mig is not None:
            ids = tuple(f"MIG-{group.name}-{i:04d}" for i in range(n))
            groups.append(GroupPlacement(group.name, A100_MIG, ids))
        elif group.share is not None:
            groups.append(
                GroupPlacement(group.name, None, (), share_gpu="GPU-shared-0001", share_milli=group.share.milli)
            )
        else:
            groups.append(GroupPlacement(group.name, None, ()))
    return RenderPlacement(node_id, tuple(groups))
