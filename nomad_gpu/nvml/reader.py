"""The one place that calls NVML: a read-only walk of a node's GPUs, MIG devices, processes and links.

NVML comes in as a constructor parameter (the `pynvml` module of nvidia-ml-py by default, imported
lazily so that a node without it still imports this package; a fake in tests). Nothing here changes a
GPU setting. A missing library, an unloaded driver or a driver/library mismatch is a typed
`NvmlUnavailable`, never an exception; a failure on one GPU marks that GPU, not the whole read.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from nomad_gpu.nvml import codes
from nomad_gpu.nvml.links import read_links, read_numa
from nomad_gpu.nvml.model import (
    Gpu,
    Inventory,
    MigDevice,
    MigMode,
    NvmlUnavailable,
    Process,
    Unavailable,
)
from nomad_gpu.nvml.xid import XidMonitor

logger = logging.getLogger(__name__)

MIB = 1 << 20


def load_pynvml() -> Any | NvmlUnavailable:
    """nvidia-ml-py's `pynvml`, or why it cannot be had. Importing it never needs a driver."""
    try:
        import pynvml
    except ImportError as exc:
        return NvmlUnavailable(Unavailable.NO_BINDINGS, f"nvidia-ml-py is not installed ({exc})")
    return pynvml


def error_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def unavailable_from(exc: BaseException) -> NvmlUnavailable:
    """Map an NVML start-up failure to the reason a person can act on."""
    code = error_code(exc)
    if code == codes.LIBRARY_NOT_FOUND:
        return NvmlUnavailable(Unavailable.NO_LIBRARY, "no NVIDIA driver on this node (libnvidia-ml.so.1 not found)")
    if code == codes.DRIVER_NOT_LOADED:
        return NvmlUnavailable(Unavailable.NO_DRIVER, "the NVIDIA kernel driver is not loaded on this node")
    if code == codes.LIB_RM_VERSION_MISMATCH:
        return NvmlUnavailable(Unavailable.VERSION_MISMATCH,
                               "NVIDIA driver/library version mismatch (driver upgraded without a reboot?)")
    if code == codes.NO_PERMISSION:
        return NvmlUnavailable(Unavailable.NO_PERMISSION, "no permission to open the NVIDIA devices")
    return NvmlUnavailable(Unavailable.ERROR, f"NVML failed to start: {exc}")


class NvmlReader:
    """Holds an NVML session (init once, shut down once) and reads snapshots from it.

    Not thread-safe: one reader per thread, or a lock around it (the device plugin keeps one lock).
    """

    def __init__(self, nvml: Any | None = None) -> None:
        self._given = nvml
        self._nvml: Any | None = None
        self._open = False
        self._xids: XidMonitor | None = None

    @property
    def nvml(self) -> Any:
        if self._nvml is None:
            raise RuntimeError("NVML session is not open")
        return self._nvml

    def open(self) -> NvmlUnavailable | None:
        """Start NVML; None when it runs, else the reason it does not."""
        if self._open:
            return None
        nvml = self._given if self._given is not None else load_pynvml()
        if isinstance(nvml, NvmlUnavailable):
            return nvml
        try:
            nvml.nvmlInitWithFlags(codes.INIT_FLAG_NO_GPUS)  # zero GPUs is a state, not an init failure
        except Exception as exc:
            if error_code(exc) is None:
                raise
            return unavailable_from(exc)
        self._nvml, self._open = nvml, True
        self._xids = XidMonitor(nvml)
        return None

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        if self._xids is not None:
            self._xids.close()
            self._xids = None
        try:
            self.nvml.nvmlShutdown()
        except Exception as exc:  # a shutdown failure leaves nothing to do but say so
            logger.warning("nvmlShutdown failed: %s", exc)

    def __enter__(self) -> NvmlReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, *, links: bool = True) -> Inventory | NvmlUnavailable:
        """One snapshot; opens the session if needed. A GPU count of zero is `NO_GPU`.

        `xid_errors` holds the critical XIDs delivered since the previous read of this session (the
        first read registers for them, so a one-shot read reports only what happens during it).
        """
        reason = self.open()
        if reason is not None:
            return reason
        nvml = self.nvml
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            if error_code(exc) is None:
                raise
            return unavailable_from(exc)
        if count == 0:
            return NvmlUnavailable(Unavailable.NO_GPU, "the NVIDIA driver sees no GPU on this node")
        handles: list[Any] = []
        gpus: list[Gpu] = []
        for index in range(count):
            handle, gpu = self._read_gpu(index)
            gpus.append(gpu)
            if handle is not None and not gpu.lost:
                handles.append((gpu, handle))
                if self._xids is not None:
                    self._xids.watch(gpu.uuid, handle)
        found_links, fabric = read_links(nvml, handles) if links else ([], frozenset[str]())
        if links:
            numa = read_numa(nvml, handles)
            gpus = [replace(g, numa_node=numa.get(g.uuid), nvswitch=g.uuid in fabric) for g in gpus]
        xids = self._xids.drain() if self._xids is not None else []
        return Inventory(driver_version=self._optional(nvml.nvmlSystemGetDriverVersion),
                         cuda_driver_version=self._optional(nvml.nvmlSystemGetCudaDriverVersion),
                         gpus=tuple(gpus), links=tuple(found_links), nvswitch=bool(fabric), xid_errors=tuple(xids))

    def handle_by_uuid(self, uuid: str) -> Any | None:
        try:
            return self.nvml.nvmlDeviceGetHandleByUUID(uuid)
        except Exception as exc:
            if error_code(exc) is None:
                raise
            return None

    # ---- one GPU ---------------------------------------------------------------------------------
    def _read_gpu(self, index: int) -> tuple[Any | None, Gpu]:
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = str(nvml.nvmlDeviceGetUUID(handle))
        except Exception as exc:
            code = error_code(exc)
            if code is None:
                raise
            # Without a handle or UUID there is no device to name; keep the slot visible by index.
            return None, Gpu(index=index, uuid=f"index-{index}", name="unknown", pci_bus_id=None,
                             memory_total_mib=None, memory_used_mib=None, utilisation_gpu_pct=None,
                             utilisation_memory_pct=None, mig_mode=None, lost=code == codes.GPU_IS_LOST,
                             error=str(exc))
        probe = _Probe()
        name = probe.call(nvml.nvmlDeviceGetName, handle)
        pci = probe.call(nvml.nvmlDeviceGetPciInfo, handle)
        memory = probe.call(nvml.nvmlDeviceGetMemoryInfo, handle)
        mode = probe.call(nvml.nvmlDeviceGetMigMode, handle)
        mig_mode = MigMode(bool(mode[0] == codes.MIG_ENABLE), bool(mode[1] == codes.MIG_ENABLE)) if mode else None
        migs: tuple[MigDevice, ...] = ()
        util = None
        if mig_mode is not None and mig_mode.current:
            migs = tuple(self._read_migs(handle, probe))
        else:
            util = probe.call(nvml.nvmlDeviceGetUtilizationRates, handle)
        procs = probe.call(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
        gpu = Gpu(
            index=index, uuid=uuid, name=str(name) if name is not None else "unknown",
            pci_bus_id=str(pci.busId) if pci is not None else None,
            memory_total_mib=_mib(memory.total) if memory is not None else None,
            memory_used_mib=_mib(memory.used) if memory is not None else None,
            utilisation_gpu_pct=int(util.gpu) if util is not None else None,
            utilisation_memory_pct=int(util.memory) if util is not None else None,
            mig_mode=mig_mode, migs=migs, processes=tuple(_process(p) for p in procs),
            lost=probe.lost, error=probe.error,
        )
        return handle, gpu

    def _read_migs(self, parent: Any, probe: _Probe) -> list[MigDevice]:
        nvml = self.nvml
        out: list[MigDevice] = []
        slots = probe.call(nvml.nvmlDeviceGetMaxMigDeviceCount, parent) or 0
        for k in range(int(slots)):
            # Empty slots raise NotFound (or InvalidArgument on some drivers): they are not devices.
            mig = probe.call(nvml.nvmlDeviceGetMigDeviceHandleByIndex, parent, k,
                             quiet=(codes.NOT_FOUND, codes.INVALID_ARGUMENT))
            if mig is None:
                continue
            uuid = probe.call(nvml.nvmlDeviceGetUUID, mig)
            if uuid is None:
                continue
            name = str(probe.call(nvml.nvmlDeviceGetName, mig) or "")
            gi = probe.call(nvml.nvmlDeviceGetGpuInstanceId, mig)
            ci = probe.call(nvml.nvmlDeviceGetComputeInstanceId, mig)
            start = size = None
            if gi is not None:
                # Placement needs the GPU-instance handle; unprivileged readers get NoPermission.
                inst = probe.call(nvml.nvmlDeviceGetGpuInstanceById, parent, gi, quiet=(codes.NO_PERMISSION,))
                info = probe.call(nvml.nvmlGpuInstanceGetInfo, inst) if inst is not None else None
                if info is not None:
                    start, size = int(info.placement.start), int(info.placement.size)
            memory = probe.call(nvml.nvmlDeviceGetMemoryInfo, mig)
            out.append(MigDevice(
                uuid=str(uuid), name=name, profile=mig_profile(name),
                gpu_instance_id=int(gi) if gi is not None else None,
                compute_instance_id=int(ci) if ci is not None else None,
                placement_start=start, placement_size=size,
                memory_total_mib=_mib(memory.total) if memory is not None else None,
                memory_used_mib=_mib(memory.used) if memory is not None else None,
            ))
        return out

    @staticmethod
    def _optional(fn: Any) -> Any:
        try:
            value = fn()
        except Exception as exc:
            if error_code(exc) is None:
                raise
            return None
        return value if not isinstance(value, bytes) else value.decode()


class _Probe:
    """Calls NVML for one GPU, turning "not supported" into None and remembering real failures."""

    def __init__(self) -> None:
        self.error: str | None = None
        self.lost = False

    def call(self, fn: Any, *args: Any, quiet: tuple[int, ...] = ()) -> Any:
        if self.lost:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            code = error_code(exc)
            if code is None:
                raise
            if code == codes.GPU_IS_LOST:
                self.lost = True
            if code not in codes.ABSENT and code not in quiet and self.error is None:
                self.error = f"{getattr(fn, '__name__', 'nvml')}: {exc}"
            return None


def mig_profile(name: str) -> str:
    """`"NVIDIA H100 80GB HBM3 MIG 3g.40gb"` -> `"3g.40gb"` (the name NVML gives every MIG device)."""
    _, sep, profile = name.rpartition(" MIG ")
    return profile if sep else name


def _mib(value: Any) -> int:
    return int(value) // MIB


def _process(p: Any) -> Process:
    used = getattr(p, "usedGpuMemory", None)
    gi = getattr(p, "gpuInstanceId", None)
    ci = getattr(p, "computeInstanceId", None)
    return Process(pid=int(p.pid), used_memory_mib=_mib(used) if used is not None else None,
                   gpu_instance_id=_instance_id(gi), compute_instance_id=_instance_id(ci))


def _instance_id(value: Any) -> int | None:
    # NVML reports 0xFFFFFFFF ("invalid") for processes on GPUs without MIG.
    if value is None or int(value) == codes.INVALID_INSTANCE_ID:
        return None
    return int(value)


def read_inventory(nvml: Any | None = None) -> Inventory | NvmlUnavailable:
    """Open NVML, read one snapshot, shut NVML down."""
    with NvmlReader(nvml) as reader:
        return reader.read()
