"""What the scheduler chose for a job, in the shape the renderer needs, and its checks.

The types live in `placed`, each kind's checks in its device adapter (`devices`).

DESIGN 3.2: a job reaches Nomad only with a concrete placement: a node and the exact
device instance IDs (or the shared GPU) the ledger reserved. The renderer pins
exactly these, so a placement that does not match its spec (a missing group, the
wrong number of IDs, an ID with a comma that would widen the ``${device.ids}`` set)
is a bug upstream and must fail loudly here, before Nomad is told anything.
"""

from __future__ import annotations

from nomad_gpu.render.devices import adapter_for, has_control_or_space
from nomad_gpu.render.groupspec import GroupSpec
from nomad_gpu.render.hcl import RenderError
from nomad_gpu.render.placed import GroupPlacement, RenderPlacement
from nomad_gpu.render.spec import JobSpec
from nomad_gpu.sharecontract import SHARE_DEVICE_PREFIX

__all__ = ["SHARE_DEVICE_PREFIX", "GroupPlacement", "RenderPlacement", "check_placement"]


def check_placement(spec: JobSpec, placement: RenderPlacement) -> None:
    """Raise :class:`RenderError` unless ``placement`` is exactly what ``spec`` asks for."""
    if not placement.node_id or has_control_or_space(placement.node_id):
        raise RenderError(f"invalid node id {placement.node_id!r}")
    names = [group.group for group in placement.groups]
    if len(set(names)) != len(names):
        raise RenderError(f"the placement lists a group twice: {names}")
    wanted = {group.name for group in spec.groups}
    extra = sorted(set(names) - wanted)
    if extra:
        raise RenderError(f"the placement has groups the spec does not: {extra}")
    for group in spec.groups:
        _check_group(group, placement.for_group(group.name))


def _check_group(group: GroupSpec, placed: GroupPlacement) -> None:
    adapter_for(group, placed).check(group, placed, f"groups[{group.name}]")
