"""Our values -> Nomad's protobuf messages: fingerprint groups, reservations, and per-instance stats.

Stats are keyed by the advertised IDs (Nomad filters an allocation's device stats by its allocated IDs, so
share instances report under their share IDs). Whole GPUs report utilisation and memory; MIG devices
memory only (NVML has no utilisation on MIG-enabled GPUs); share instances their GPU's figures plus the
memory of each process NVML lists on that GPU. A figure NVML does not give is left out, never sent as 0.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf import timestamp_pb2, wrappers_pb2

from nomad_gpu.nvml import Gpu, Inventory, MigDevice, NvmlUnavailable
from nomad_gpu.plugin.devices import AttrValue, Group, Instance, Kind
from nomad_gpu.plugin.proto import attribute_pb2, device_pb2, stats_pb2
from nomad_gpu.plugin.reserve import Reservation


def attribute(value: AttrValue, unit: str) -> attribute_pb2.Attribute:
    if isinstance(value, bool):
        return attribute_pb2.Attribute(bool_val=value)
    if isinstance(value, int):
        return attribute_pb2.Attribute(int_val=value, unit=unit)
    if isinstance(value, float):
        return attribute_pb2.Attribute(float_val=value, unit=unit)
    return attribute_pb2.Attribute(string_val=value)


def fingerprint(groups: Iterable[Group]) -> device_pb2.FingerprintResponse:
    out = device_pb2.FingerprintResponse()
    for g in groups:
        msg = out.device_group.add(vendor=g.vendor, device_type=g.type, device_name=g.name)
        for name, value, unit in g.attributes:
            msg.attributes[name].CopyFrom(attribute(value, unit))
        for inst in g.instances:
            dev = msg.devices.add(ID=inst.id, healthy=inst.healthy, health_description=inst.health)
            if inst.pci_bus_id:
                dev.hw_locality.pci_bus_id = inst.pci_bus_id
    return out


def reservation(res: Reservation) -> device_pb2.ReserveResponse:
    out = device_pb2.ReserveResponse()
    for k, v in res.envs.items():
        out.container_res.envs[k] = v
    for m in res.mounts:
        out.container_res.mounts.add(task_path=m.task_path, host_path=m.host_path, read_only=m.read_only)
    return out


def _ratio(used: int, total: int, unit: str, desc: str) -> stats_pb2.StatValue:
    return stats_pb2.StatValue(int_numerator_val=wrappers_pb2.Int64Value(value=used),
                               int_denominator_val=wrappers_pb2.Int64Value(value=total), unit=unit, desc=desc)


def _value(value: int, unit: str, desc: str) -> stats_pb2.StatValue:
    return stats_pb2.StatValue(int_numerator_val=wrappers_pb2.Int64Value(value=value), unit=unit, desc=desc)


def _gpu_stats(gpu: Gpu, obj: stats_pb2.StatObject) -> stats_pb2.StatValue | None:
    summary = None
    if gpu.utilisation_gpu_pct is not None:
        summary = _value(gpu.utilisation_gpu_pct, "%", "GPU utilization")
        obj.attributes["GPU utilization"].CopyFrom(summary)
    if gpu.utilisation_memory_pct is not None:
        obj.attributes["Memory utilization"].CopyFrom(_value(gpu.utilisation_memory_pct, "%", "Memory utilization"))
    if gpu.memory_used_mib is not None and gpu.memory_total_mib is not None:
        state = _ratio(gpu.memory_used_mib, gpu.memory_total_mib, "MiB", "Memory in use")
        obj.attributes["Memory state"].CopyFrom(state)
        summary = summary or state
    return summary


def _mig_stats(mig: MigDevice, obj: stats_pb2.StatObject) -> stats_pb2.StatValue | None:
    if mig.memory_used_mib is None or mig.memory_total_mib is None:
        return None
    state = _ratio(mig.memory_used_mib, mig.memory_total_mib, "MiB", "Memory in use")
    obj.attributes["Memory state"].CopyFrom(state)
    return state


def _processes(gpu: Gpu, obj: stats_pb2.StatObject) -> None:
    listed = [p for p in gpu.processes if p.used_memory_mib is not None]
    if not listed:
        return
    procs = obj.nested["processes"]
    for p in listed:
        assert p.used_memory_mib is not None
        procs.attributes[str(p.pid)].CopyFrom(_value(p.used_memory_mib, "MiB", f"memory of process {p.pid}"))


def instance_stats(inst: Instance, inventory: Inventory) -> tuple[stats_pb2.StatValue | None,
                                                                  stats_pb2.StatObject] | None:
    """The figures for one advertised instance, or None when NVML has none for it now."""
    gpu = inventory.gpu(inst.gpu_uuid)
    if gpu is None or gpu.lost:
        return None
    obj = stats_pb2.StatObject()
    if inst.kind is Kind.MIG:
        mig = next((m for m in gpu.migs if m.uuid == inst.visible), None)
        summary = _mig_stats(mig, obj) if mig is not None else None
    else:
        summary = _gpu_stats(gpu, obj)
        if inst.kind is Kind.SHARE:
            _processes(gpu, obj)
    if summary is None and not obj.attributes and not obj.nested:
        return None
    return summary, obj


def stats(groups: Iterable[Group], inventory: Inventory | NvmlUnavailable, now_s: float) -> device_pb2.StatsResponse:
    out = device_pb2.StatsResponse()
    if isinstance(inventory, NvmlUnavailable):
        return out
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(now_s * 1e9))
    for g in groups:
        msg = None
        for inst in g.instances:
            got = instance_stats(inst, inventory)
            if got is None:
                continue
            if msg is None:
                msg = out.groups.add(vendor=g.vendor, type=g.type, name=g.name)
            summary, obj = got
            ds = msg.instance_stats[inst.id]
            if summary is not None:
                ds.summary.CopyFrom(summary)
            ds.stats.CopyFrom(obj)
            ds.timestamp.CopyFrom(stamp)
    return out
