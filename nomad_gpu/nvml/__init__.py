"""The node side's view of its GPUs through NVML: inventory, processes, links, XIDs; a fake for tests.

`pynvml` (nvidia-ml-py) is imported only when a reader opens a session, so importing this package never
needs a driver.
"""

from nomad_gpu.nvml.fake import FakeNvml
from nomad_gpu.nvml.layouts import LAYOUTS, load_layout
from nomad_gpu.nvml.model import (
    Gpu,
    Inventory,
    Link,
    MigDevice,
    MigMode,
    NodeReport,
    NvmlUnavailable,
    Process,
    Unavailable,
    XidError,
)
from nomad_gpu.nvml.reader import NvmlReader, read_inventory

__all__ = [
    "LAYOUTS", "FakeNvml", "Gpu", "Inventory", "Link", "MigDevice", "MigMode", "NodeReport", "NvmlReader",
    "NvmlUnavailable", "Process", "Unavailable", "XidError", "load_layout", "read_inventory",
]
