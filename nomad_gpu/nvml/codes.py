"""NVML's numeric return codes and flags, written once (they are part of NVML's C ABI and never change).

The reader matches errors by `exc.value`, not by pynvml's generated exception classes, so that a fake
NVML needs only one exception type with a `value`.
"""

from __future__ import annotations

SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
IN_USE = 19
INSUFFICIENT_RESOURCES = 23
UNKNOWN = 999

ABSENT = frozenset({NOT_SUPPORTED, FUNCTION_NOT_FOUND})
"""Codes that mean "this GPU or driver has no such figure": the figure is absent, nothing is wrong."""

INIT_FLAG_NO_GPUS = 1
MIG_DISABLE, MIG_ENABLE = 0, 1
FEATURE_ENABLED = 1
NVLINK_MAX_LINKS = 18
"""Links probed per GPU: 18 covers every GPU shipped so far (H100/H200 SXM have 18); older bindings know fewer."""
NVLINK_DEVICE_TYPE_GPU, NVLINK_DEVICE_TYPE_SWITCH = 0, 2
INVALID_INSTANCE_ID = 0xFFFFFFFF
COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0
GPU_INSTANCE_PROFILE_COUNT = 0x12
"""GPU-instance profile enums are 0 .. COUNT-1 (nvidia-ml-py 13's `NVML_GPU_INSTANCE_PROFILE_COUNT`)."""

EVENT_TYPE_XID_CRITICAL = 0x8

TOPOLOGY_NAMES = {0: "board", 10: "switch", 20: "switches", 30: "hostbridge", 40: "node", 50: "system"}
"""nvmlDeviceGetTopologyCommonAncestor: lower is closer (nvidia-smi topo's PIX/PXB/PHB/NODE/SYS)."""

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""XIDs caused by the application, not the GPU (graphics/MMU faults, a killed channel, a context-switch
timeout): NVIDIA's Kubernetes device plugin ignores these by default for health; so do we."""
