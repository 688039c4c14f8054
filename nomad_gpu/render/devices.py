"""The Nomad side of each GPU kind: how a placement of it becomes a task group's device block.

One adapter per kind, registered under the core's kind name (`domain/kinds`: ``whole``, ``mig``,
``share``; ``none`` for a group without GPUs). An adapter builds the group's `GroupPlacement` from the
devices the core chose (`group_placement`), checks it against the spec (`check`) and fills the group's
template context (`render`: the ``device`` block, env, meta). A new kind adds an adapter here with
`register_device`; the renderer itself names no kind. The render layer imports nothing of the core's,
so the devices come as `Placed` values and the kind as its name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nomad_gpu.render.groupspec import GroupSpec
from nomad_gpu.render.hcl import RenderError
from nomad_gpu.render.placed import GroupPlacement
from nomad_gpu.render.speckinds import spec_kind
from nomad_gpu.sharecontract import SHARE_DEVICE_PREFIX

__all__ = ["ENV_VISIBLE_DEVICES", "META_SHARE_GPU", "META_SHARE_MILLI", "NO_GPU", "DeviceAdapter",
           "GroupContext", "Placed", "adapter_for", "device_adapter", "register_device", "unregister_device"]

META_SHARE_GPU = "nomad_gpu_share_gpu"
"""Group meta of a time-slice share: the ``GPU-...`` ID it runs on."""
META_SHARE_MILLI = "nomad_gpu_share_milli"
"""Group meta of a time-slice share: its milli-GPU."""
ENV_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
"""What the NVIDIA container runtime reads to decide which GPUs a container sees."""
NO_GPU = "void"
"""``NVIDIA_VISIBLE_DEVICES`` of a group that holds no GPU: many CUDA images default it to ``all``, and on a
node whose default Docker runtime is nvidia that would hand every GPU to a job that booked none."""



@dataclass(frozen=True)
class Placed:
    """One allocation's devices as the core chose them (`AllocPlacement`'s device fields)."""

    instance_ids: tuple[str, ...] = ()
    device_name: str | None = None
    share_gpu: str | None = None
    share_milli: int = 0


@dataclass
class GroupContext:
    """The parts of a task group's template context that an adapter fills."""

    driver: str
    env: dict[str, str]
    config: dict[str, Any]
    meta: dict[str, str] = field(default_factory=dict)
    device: dict[str, Any] | None = None


class DeviceAdapter(Protocol):
    @property
    def kind(self) -> str: ...

    def group_placement(self, group: str, placed: Sequence[Placed], vendor: str) -> GroupPlacement:
        """The group's placement from its allocations' devices (one per allocation, in index order)."""
        ...

    def check(self, group: GroupSpec, placed: GroupPlacement, where: str) -> None:
        """Raise `RenderError` unless `placed` is exactly what `group` may be pinned to."""
        ...

    def render(self, group: GroupSpec, placed: GroupPlacement, ctx: GroupContext) -> None:
        """Fill the device block, env and meta of the group's context."""
        ...


class PinnedDevices:
    """Whole GPUs and MIG instances: a ``<vendor>/gpu/<device group>`` block pinned by ``ids``."""

    def __init__(self, kind: str, spec_word: str) -> None:
        self.kind = kind
        self.spec_word = spec_word

    def group_placement(self, group: str, placed: Sequence[Placed], vendor: str) -> GroupPlacement:
        ids = tuple(i for p in placed for i in p.instance_ids)
        return GroupPlacement(group, f"{vendor}/gpu/{placed[0].device_name or ''}", ids, kind=self.kind)

    def check(self, group: GroupSpec, placed: GroupPlacement, where: str) -> None:
        if not placed.device_name:
            raise RenderError(f"{where} asks for {self.spec_word} but its placement names no device")
        expected = group.device_count * group.count
        if len(placed.device_ids) != expected:
            raise RenderError(
                f"{where} needs {expected} device ids ({group.count} x {group.device_count}), "
                f"the placement pins {len(placed.device_ids)}"
            )
        check_ids(where, placed.device_ids)
        no_share(where, placed)

    def render(self, group: GroupSpec, placed: GroupPlacement, ctx: GroupContext) -> None:
        if placed.device_name is not None:
            ctx.device = {"name": placed.device_name, "count": group.device_count, "ids": ",".join(placed.device_ids)}


class ShareDevices:
    """A time-slice share: the device plugin's share instances pinned like any device, or (advisory
    sharing, no plugin) the GPU itself named in the job's environment."""

    kind = "share"

    def group_placement(self, group: str, placed: Sequence[Placed], vendor: str) -> GroupPlacement:
        (p,) = placed
        if p.share_gpu is not None:  # the device plugin's share instances, pinned like any device
            return GroupPlacement(group, SHARE_DEVICE_PREFIX + (p.device_name or ""), p.instance_ids,
                                  share_gpu=p.share_gpu, share_milli=p.share_milli, kind=self.kind)
        # advisory sharing: the GPU itself, named in the job's environment
        return GroupPlacement(group, None, (), share_gpu=p.instance_ids[0], share_milli=p.share_milli, kind=self.kind)

    def check(self, group: GroupSpec, placed: GroupPlacement, where: str) -> None:
        if placed.device_name is not None:
            if not placed.device_name.startswith(SHARE_DEVICE_PREFIX) or not placed.device_ids:
                raise RenderError(f"{where}: a share pins share instances of {SHARE_DEVICE_PREFIX}<model>, "
                                  f"not {placed.device_name!r} x {len(placed.device_ids)}")
            check_ids(where, placed.device_ids)
        elif placed.device_ids:
            raise RenderError(f"{where} asks for no whole device but its placement pins some")
        if not placed.share_gpu or has_control_or_space(placed.share_gpu) or "," in placed.share_gpu:
            raise RenderError(f"{where} asks for a share but its placement names no valid shared GPU")
        milli = group.share.milli if group.share is not None else 0
        if placed.share_milli is not None and placed.share_milli < milli:
            raise RenderError(f"{where} asks for {milli} milli-GPU, the placement reserves {placed.share_milli}")

    def render(self, group: GroupSpec, placed: GroupPlacement, ctx: GroupContext) -> None:
        milli = str(placed.share_milli or (group.share.milli if group.share is not None else 0))
        if placed.device_name is not None:
            # The device plugin's share instances: Nomad reserves them (the plugin's Reserve sets
            # NVIDIA_VISIBLE_DEVICES to the GPU), like any device, so the count is the instances pinned.
            ids = placed.device_ids
            ctx.device = {"name": placed.device_name, "count": len(ids), "ids": ",".join(ids)}
            ctx.meta[META_SHARE_GPU] = placed.share_gpu or ""
            ctx.meta[META_SHARE_MILLI] = milli
        elif placed.share_gpu is not None:
            # Advisory sharing (no plugin): not a Nomad device, so the job names the GPU itself.
            ctx.env[ENV_VISIBLE_DEVICES] = placed.share_gpu
            if ctx.driver == "docker":
                # Nomad's docker driver picks the nvidia runtime only for devices it
                # reserved itself; a share is not a Nomad device, so ask for it here.
                ctx.config["runtime"] = "nvidia"
            ctx.meta[META_SHARE_GPU] = placed.share_gpu
            ctx.meta[META_SHARE_MILLI] = milli


class NoDevice:
    """A group without GPUs: no device block, and no GPU visible in its containers."""

    kind = "none"

    def group_placement(self, group: str, placed: Sequence[Placed], vendor: str) -> GroupPlacement:
        return GroupPlacement(group, None, ())

    def check(self, group: GroupSpec, placed: GroupPlacement, where: str) -> None:
        if placed.device_name is not None or placed.device_ids:
            raise RenderError(f"{where} asks for no whole device but its placement pins some")
        no_share(where, placed)

    def render(self, group: GroupSpec, placed: GroupPlacement, ctx: GroupContext) -> None:
        ctx.env[ENV_VISIBLE_DEVICES] = NO_GPU


_ADAPTERS: dict[str, DeviceAdapter] = {}


def register_device(adapter: DeviceAdapter) -> DeviceAdapter:
    """Add the adapter of a kind (idempotent for the same object); a second one for a kind is a bug."""
    found = _ADAPTERS.get(adapter.kind)
    if found is adapter:
        return adapter
    if found is not None:
        raise ValueError(f"a device adapter for kind {adapter.kind!r} is already registered")
    _ADAPTERS[adapter.kind] = adapter
    return adapter


def unregister_device(kind: str) -> None:
    _ADAPTERS.pop(kind, None)


def device_adapter(kind: str) -> DeviceAdapter:
    """The adapter registered for `kind`; RenderError for a kind nothing renders."""
    try:
        return _ADAPTERS[kind]
    except KeyError:
        raise RenderError(f"no device adapter for GPU kind {kind!r}") from None


def adapter_for(group: GroupSpec, placed: GroupPlacement) -> DeviceAdapter:
    """The adapter of the kind placed, or of the kind the spec group asks for when the placement
    does not say (a preview, a placement built by hand)."""
    field = group.capacity_kind  # the kind the spec group's own field asks for (render/speckinds.py)
    return device_adapter(placed.kind or (spec_kind(field).kind if field is not None else "none"))


def check_ids(where: str, device_ids: tuple[str, ...]) -> None:
    if len(set(device_ids)) != len(device_ids):
        raise RenderError(f"{where}: the placement pins a device id twice")
    for device_id in device_ids:
        if not device_id or "," in device_id or has_control_or_space(device_id):
            raise RenderError(f"{where}: invalid device id {device_id!r}")


def no_share(where: str, placed: GroupPlacement) -> None:
    if placed.share_gpu is not None or placed.share_milli is not None:
        raise RenderError(f"{where} asks for no share but its placement has one")


def has_control_or_space(text: str) -> bool:
    return any(char.isspace() or not char.isprintable() for char in text)


for _adapter in (PinnedDevices("whole", "gpu"), PinnedDevices("mig", "mig"), ShareDevices(), NoDevice()):
    register_device(_adapter)
