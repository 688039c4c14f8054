"""Reserve: what a task gets for the device IDs Nomad allocated it (environment and mounts), or a refusal.

Any advertised ID maps to the real UUIDs in `NVIDIA_VISIBLE_DEVICES` (share IDs to their GPU's UUID,
once per GPU), which makes the Docker driver use the NVIDIA runtime exactly as with the stock plugin.
IDs not in the last fingerprint are refused (the stock plugin's guard against a stale allocation).

With MPS (the operator runs a control daemon per shared GPU and names its pipe directory in the config),
a share reservation also mounts that directory and asks for the share's part of the GPU:
`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` = 100 * k / N for k of N slots and, optionally,
`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` = k / N of the GPU's memory. CUDA applies these client limits only
within the daemon's own defaults (a client can tighten them, never loosen them); docs/node.md says which
part the daemon enforces and which stays advisory. Nothing here changes a GPU setting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nomad_gpu.plugin.config import PluginConfig
from nomad_gpu.plugin.devices import Instance, Kind


class ReserveError(ValueError):
    """Nomad gets this as the Reserve error; the task fails to start with it."""


@dataclass(frozen=True)
class Mount:
    task_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True)
class Reservation:
    envs: Mapping[str, str]
    mounts: tuple[Mount, ...] = ()


def reserve(device_ids: Sequence[str], instances: Mapping[str, Instance], config: PluginConfig) -> Reservation:
    if not device_ids:
        raise ReserveError("no device IDs to reserve")
    unknown = [d for d in device_ids if d not in instances]
    if unknown:
        raise ReserveError(f"unknown device IDs: {', '.join(unknown)}")
    chosen = [instances[d] for d in dict.fromkeys(device_ids)]
    visible = list(dict.fromkeys(i.visible for i in chosen))
    envs = {"NVIDIA_VISIBLE_DEVICES": ",".join(visible)}
    shares = [i for i in chosen if i.kind is Kind.SHARE]
    if not shares or not config.mps_pipe_directory:
        return Reservation(envs)
    return _with_mps(envs, visible, shares, config)


def _with_mps(envs: dict[str, str], visible: list[str], shares: list[Instance],
              config: PluginConfig) -> Reservation:
    taken: dict[str, list[Instance]] = {}
    for inst in shares:
        taken.setdefault(inst.gpu_uuid, []).append(inst)
    pipes = {config.mps_pipe_directory.format(uuid=uuid, index=insts[0].gpu_index) for uuid, insts in taken.items()}
    if len(pipes) > 1:
        # A CUDA client talks to one MPS daemon; shares of GPUs served by different daemons cannot be combined.
        raise ReserveError(f"share instances of {len(taken)} GPUs with separate MPS daemons in one task; "
                           "request shares of one GPU")
    (pipe,) = pipes
    percent = min(max(1, 100 * len(insts) // _slots(insts[0])) for insts in taken.values())
    envs = {**envs, "CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(percent)}
    if config.mps_pinned_memory:
        limits = []
        for ordinal, uuid in enumerate(visible):
            insts = taken.get(uuid)
            memory = insts[0].gpu_memory_mib if insts else None
            if insts and memory:
                limits.append(f"{ordinal}={memory * len(insts) // _slots(insts[0])}M")
        if limits:
            envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(limits)
    return Reservation(envs, (Mount(task_path=pipe, host_path=pipe, read_only=False),))


def _slots(inst: Instance) -> int:
    return inst.slots or 1
