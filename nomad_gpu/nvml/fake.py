"""A fake NVML: the same function names pynvml has, answering from a described node, for tests and demos.

The reader and the device plugin take NVML as a constructor parameter; this object stands in for the
`pynvml` module on machines without a GPU. It behaves the way the real library does where the
difference matters: "not supported" for utilisation on MIG-enabled GPUs and for MIG mode on GPUs
without MIG, NotFound for empty MIG slots, GPU_IS_LOST on every call to a GPU that fell off the bus,
XID events only after registration, a Timeout from a non-blocking event wait with nothing pending.
The node it answers from is described with the types of `fakenode.py`.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

from nomad_gpu.nvml import codes
from nomad_gpu.nvml.fakemig import COMPUTE_PROFILE_FOR_SLICES, FakeProfile, check_create, free_gi_id, profiles_for
from nomad_gpu.nvml.fakenode import FakeGpu, FakeMig, FakeNode, FakeProcess, fake_uuid

__all__ = ["MIB", "FakeGpu", "FakeMig", "FakeNode", "FakeNvml", "FakeProcess", "NVMLError", "fake_uuid"]

MIB = 1 << 20
class NVMLError(Exception):
    """pynvml's error: one type with the NVML return code in `value`."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return f"NVML error {self.value}"


@dataclass(frozen=True)
class _Handle:
    gpu: int
    mig: int | None = None


@dataclass(frozen=True)
class _GpuInstance:
    gpu: int
    gi: int


@dataclass(frozen=True)
class _ComputeInstance:
    gpu: int
    gi: int
    ci: int


@dataclass
class _EventSet:
    watched: set[int] = field(default_factory=set)
    events: deque[Any] = field(default_factory=deque)


class FakeNvml:
    """Stand-in for the `pynvml` module. Safe to share between threads (one lock, like NVML's own)."""

    NVMLError = NVMLError

    def __init__(self, node: FakeNode) -> None:
        self.node = node.with_ids()
        self._lock = threading.Lock()
        self._sets: list[_EventSet] = []
        self._raised: set[int] = set()
        self._created = 0
        self.initialised = 0
        self.changes: list[str] = []
        """Every MIG change made, in order (`destroy CI 1/0 on GPU-...`), for tests to read."""

    # ---- what tests change ----------------------------------------------------------------------
    def inject_xid(self, gpu_uuid: str, code: int, gpu_instance_id: int | None = None) -> None:
        index = self._index(gpu_uuid)
        with self._lock:
            for s in self._sets:
                if index in s.watched:
                    s.events.append(self._event(index, code, gpu_instance_id))

    def set_gpu(self, gpu_uuid: str, **changes: Any) -> None:
        index = self._index(gpu_uuid)
        gpus = list(self.node.gpus)
        gpus[index] = replace(gpus[index], **changes)
        self.node = replace(self.node, gpus=tuple(gpus))

    # ---- the pynvml surface ---------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        if self.node.init_error is not None:
            raise NVMLError(self.node.init_error)
        if not self.node.gpus and not flags & codes.INIT_FLAG_NO_GPUS:
            raise NVMLError(codes.NOT_FOUND)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._need_init()
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._need_init()
        return self.node.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._need_init()
        return self.node.cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._need_init()
        return len(self.node.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._need_init()
        if not 0 <= index < len(self.node.gpus):
            raise NVMLError(codes.INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> _Handle:
        self._need_init()
        for i, g in enumerate(self.node.gpus):
            if g.uuid == uuid:
                return _Handle(i)
            for k, m in enumerate(g.migs):
                if m.uuid == uuid:
                    return _Handle(i, k)
        raise NVMLError(codes.NOT_FOUND)

    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        self._need_init()  # answers even for a lost GPU: NVML caches the identity
        g = self.node.gpus[h.gpu]
        return g.uuid if h.mig is None else g.migs[h.mig].uuid

    def nvmlDeviceGetName(self, h: _Handle) -> str:
        g = self._gpu(h)
        return g.name if h.mig is None else f"{g.name} MIG {g.migs[h.mig].profile}"

    def nvmlDeviceGetPciInfo(self, h: _Handle) -> Any:
        g = self._gpu(h)
        return SimpleNamespace(busId=g.bus_id, pciDeviceId=0)

    def nvmlDeviceGetMemoryInfo(self, h: _Handle) -> Any:
        g = self._gpu(h)
        if h.mig is not None:
            m = g.migs[h.mig]
            total, used = m.memory_mib * MIB, m.used_mib * MIB
        else:
            total, used = g.memory_mib * MIB, g.used_mib * MIB
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, h: _Handle) -> Any:
        g = self._gpu(h)
        if h.mig is not None or (g.mig is not None and g.mig[0]):
            raise NVMLError(codes.NOT_SUPPORTED)  # nvml.h: not supported on MIG-enabled GPUs
        return SimpleNamespace(gpu=g.utilisation[0], memory=g.utilisation[1])

    def nvmlDeviceGetComputeRunningProcesses(self, h: _Handle) -> list[Any]:
        g = self._gpu(h)
        out = []
        for p in g.processes:
            out.append(SimpleNamespace(
                pid=p.pid, usedGpuMemory=p.used_mib * MIB if p.used_mib is not None else None,
                gpuInstanceId=codes.INVALID_INSTANCE_ID if p.gpu_instance_id is None else p.gpu_instance_id,
                computeInstanceId=codes.INVALID_INSTANCE_ID if p.compute_instance_id is None
                else p.compute_instance_id))
        return out

    def nvmlDeviceGetMigMode(self, h: _Handle) -> list[int]:
        g = self._gpu(h)
        if g.mig is None or h.mig is not None:
            raise NVMLError(codes.NOT_SUPPORTED)
        return [int(g.mig[0]), int(g.mig[1])]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Handle) -> int:
        g = self._gpu(h)
        if g.mig is None:
            raise NVMLError(codes.NOT_SUPPORTED)
        return 7 if g.mig[0] else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Handle, index: int) -> _Handle:
        g = self._gpu(h)
        if not g.mig or not g.mig[0] or not 0 <= index < 7:
            raise NVMLError(codes.INVALID_ARGUMENT)
        devices = [k for k, m in enumerate(g.migs) if m.has_compute_instance]
        if index >= len(devices):
            raise NVMLError(codes.NOT_FOUND)
        return _Handle(h.gpu, devices[index])

    def nvmlDeviceGetGpuInstanceId(self, h: _Handle) -> int:
        return self._mig(h).gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, h: _Handle) -> int:
        return self._mig(h).compute_instance_id

    def nvmlDeviceGetGpuInstanceById(self, h: _Handle, gi: int) -> _GpuInstance:
        self._gi_mig(_GpuInstance(h.gpu, gi))
        return _GpuInstance(h.gpu, gi)

    def nvmlGpuInstanceGetInfo(self, gi: _GpuInstance) -> Any:
        m = self._gi_mig(gi)
        profile = self._profile_of(gi.gpu, m)
        return SimpleNamespace(id=gi.gi, profileId=profile.id if profile else 0,
                               placement=SimpleNamespace(start=m.start, size=m.size))

    # ---- MIG changes (reference/nvml-mig.md section 2; nvml.h) -----------------------------------
    @staticmethod
    def c_nvmlGpuInstancePlacement_t(start: int, size: int) -> Any:
        return SimpleNamespace(start=start, size=size)

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: _Handle, profile: int, version: int = 2) -> Any:
        g = self._gpu(h)
        if not g.mig or not g.mig[0]:
            raise NVMLError(codes.NOT_SUPPORTED)  # the profile table exists only in MIG mode
        p = next((p for p in profiles_for(g.name) if p.enum == profile), None)
        if p is None:
            raise NVMLError(codes.NOT_SUPPORTED if 0 <= profile < codes.GPU_INSTANCE_PROFILE_COUNT
                            else codes.INVALID_ARGUMENT)
        return SimpleNamespace(id=p.id, sliceCount=p.compute, instanceCount=p.count, memorySizeMB=p.memory_mib,
                               name=f"MIG {p.name}".encode())

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, h: _Handle, profile_id: int, placement: Any) -> _GpuInstance:
        placement = getattr(placement, "_obj", placement)  # ctypes.byref(...) as the real call takes it
        with self._lock:
            g = self._gpu(h)
            if not g.mig or not g.mig[0]:
                raise NVMLError(codes.NOT_SUPPORTED)
            taken = [((p.id if (p := self._profile_of(h.gpu, m)) else -1), m.start, m.size) for m in g.migs]
            got = check_create(profiles_for(g.name), taken, profile_id, int(placement.start), int(placement.size))
            if isinstance(got, int):
                raise NVMLError(got)
            gi = free_gi_id({m.gpu_instance_id for m in g.migs})
            self._created += 1
            mig = FakeMig(got.name, int(placement.start), got.size, got.memory_mib, gi,
                          uuid=fake_uuid("MIG", g.uuid, "created", self._created), has_compute_instance=False)
            self._set_migs(h.gpu, (*g.migs, mig))
            self.changes.append(f"create GI {gi} {got.name}@{placement.start} on {g.uuid}")
            return _GpuInstance(h.gpu, gi)

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gi: _GpuInstance, profile: int, eng_profile: int,
                                                     version: int = 2) -> Any:
        m = self._gi_mig(gi)
        p = self._profile_of(gi.gpu, m)
        if p is None or COMPUTE_PROFILE_FOR_SLICES.get(p.compute) != profile:
            raise NVMLError(codes.NOT_SUPPORTED)  # the fake models only a compute instance spanning its GI
        return SimpleNamespace(id=profile, sliceCount=p.compute, instanceCount=1)

    def nvmlGpuInstanceCreateComputeInstance(self, gi: _GpuInstance, profile_id: int) -> _ComputeInstance:
        with self._lock:
            m = self._gi_mig(gi)
            if m.has_compute_instance:
                raise NVMLError(codes.INSUFFICIENT_RESOURCES)
            self._replace_mig(gi, replace(m, has_compute_instance=True, compute_instance_id=0))
            self.changes.append(f"create CI {gi.gi}/0 on {self.node.gpus[gi.gpu].uuid}")
            return _ComputeInstance(gi.gpu, gi.gi, 0)

    def nvmlGpuInstanceGetComputeInstanceById(self, gi: _GpuInstance, ci: int) -> _ComputeInstance:
        m = self._gi_mig(gi)
        if not m.has_compute_instance or m.compute_instance_id != ci:
            raise NVMLError(codes.NOT_FOUND)
        return _ComputeInstance(gi.gpu, gi.gi, ci)

    def nvmlComputeInstanceDestroy(self, ci: _ComputeInstance) -> None:
        with self._lock:
            m = self._gi_mig(_GpuInstance(ci.gpu, ci.gi))
            if not m.has_compute_instance or m.compute_instance_id != ci.ci:
                raise NVMLError(codes.NOT_FOUND)
            if self._in_use(ci.gpu, ci.gi):
                raise NVMLError(codes.IN_USE)
            self._replace_mig(_GpuInstance(ci.gpu, ci.gi), replace(m, has_compute_instance=False))
            self.changes.append(f"destroy CI {ci.gi}/{ci.ci} on {self.node.gpus[ci.gpu].uuid}")

    def nvmlGpuInstanceDestroy(self, gi: _GpuInstance) -> None:
        with self._lock:
            m = self._gi_mig(gi)
            if m.has_compute_instance or self._in_use(gi.gpu, gi.gi):
                raise NVMLError(codes.IN_USE)  # nvml.h: processes or compute instances still active
            g = self.node.gpus[gi.gpu]
            self._set_migs(gi.gpu, tuple(x for x in g.migs if x.gpu_instance_id != gi.gi))
            self.changes.append(f"destroy GI {gi.gi} on {g.uuid}")

    def nvmlDeviceGetNvLinkState(self, h: _Handle, link: int) -> int:
        g = self._gpu(h)
        if link >= len(g.nvlink_peers) + g.nvswitch_links:
            raise NVMLError(codes.NOT_SUPPORTED if link == 0 else codes.INVALID_ARGUMENT)
        return codes.FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: _Handle, link: int) -> int:
        g = self._gpu(h)
        return codes.NVLINK_DEVICE_TYPE_GPU if link < len(g.nvlink_peers) else codes.NVLINK_DEVICE_TYPE_SWITCH

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: _Handle, link: int) -> Any:
        g = self._gpu(h)
        if link >= len(g.nvlink_peers):
            raise NVMLError(codes.NOT_SUPPORTED)
        return SimpleNamespace(busId=g.nvlink_peers[link])

    def nvmlDeviceGetNumaNodeId(self, h: _Handle) -> int:
        g = self._gpu(h)
        if not self.node.numa_ids or h.mig is not None:
            raise NVMLError(codes.NOT_SUPPORTED)
        return g.numa

    def nvmlDeviceGetTopologyCommonAncestor(self, a: _Handle, b: _Handle) -> int:
        ga, gb = self._gpu(a), self._gpu(b)
        if ga.numa != gb.numa:
            return 50
        return 10 if ga.pcie_switch == gb.pcie_switch else 40

    def nvmlEventSetCreate(self) -> _EventSet:
        self._need_init()
        s = _EventSet()
        with self._lock:
            self._sets.append(s)
        return s

    def nvmlDeviceRegisterEvents(self, h: _Handle, event_types: int, s: _EventSet) -> None:
        g = self._gpu(h)
        with self._lock:
            s.watched.add(h.gpu)
            if event_types & codes.EVENT_TYPE_XID_CRITICAL and h.gpu not in self._raised:
                self._raised.add(h.gpu)
                s.events.extend(self._event(h.gpu, code, None) for code in g.xids)

    def nvmlEventSetWait(self, s: _EventSet, timeout_ms: int) -> Any:
        self._need_init()
        with self._lock:
            if not s.events:
                raise NVMLError(codes.TIMEOUT)
            return s.events.popleft()

    def nvmlEventSetFree(self, s: _EventSet) -> None:
        with self._lock:
            if s in self._sets:
                self._sets.remove(s)

    # ---- helpers --------------------------------------------------------------------------------
    def _need_init(self) -> None:
        if self.initialised <= 0:
            raise NVMLError(codes.UNINITIALIZED)

    def _gpu(self, h: _Handle) -> FakeGpu:
        self._need_init()
        g = self.node.gpus[h.gpu]
        if g.lost:
            raise NVMLError(codes.GPU_IS_LOST)
        return g

    def _mig(self, h: _Handle) -> FakeMig:
        g = self._gpu(h)
        if h.mig is None:
            raise NVMLError(codes.INVALID_ARGUMENT)
        return g.migs[h.mig]

    def _gi_mig(self, gi: _GpuInstance) -> FakeMig:
        g = self._gpu(_Handle(gi.gpu))
        for m in g.migs:
            if m.gpu_instance_id == gi.gi:
                return m
        raise NVMLError(codes.NOT_FOUND)

    def _profile_of(self, gpu: int, m: FakeMig) -> FakeProfile | None:
        return next((p for p in profiles_for(self.node.gpus[gpu].name) if p.name == m.profile), None)

    def _in_use(self, gpu: int, gi: int) -> bool:
        return any(p.gpu_instance_id == gi for p in self.node.gpus[gpu].processes)

    def _set_migs(self, gpu: int, migs: tuple[FakeMig, ...]) -> None:
        gpus = list(self.node.gpus)
        gpus[gpu] = replace(gpus[gpu], migs=migs)
        self.node = replace(self.node, gpus=tuple(gpus))

    def _replace_mig(self, gi: _GpuInstance, new: FakeMig) -> None:
        g = self.node.gpus[gi.gpu]
        self._set_migs(gi.gpu, tuple(new if m.gpu_instance_id == gi.gi else m for m in g.migs))

    def _index(self, gpu_uuid: str) -> int:
        for i, g in enumerate(self.node.gpus):
            if g.uuid == gpu_uuid:
                return i
        raise KeyError(gpu_uuid)

    def _event(self, index: int, code: int, gi: int | None) -> Any:
        return SimpleNamespace(device=_Handle(index), eventType=codes.EVENT_TYPE_XID_CRITICAL, eventData=code,
                               gpuInstanceId=codes.INVALID_INSTANCE_ID if gi is None else gi,
                               computeInstanceId=codes.INVALID_INSTANCE_ID)
