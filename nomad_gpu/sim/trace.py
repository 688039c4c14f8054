"""Trace files (the openb CSV family) read into the core's own types.

The simulator must drive the same placement code as the service, so a trace node becomes an
`inventory.Node` whose GPUs are in `GpuMode.FLEX` (they take whole and fractional asks, as the
paper's cluster does) and a trace task becomes an `AllocAsk`: `WholeGpus(n)` for whole GPUs,
`GpuShare(milli)` for a fraction of one GPU, no GPU for CPU-only tasks, `gpu_spec` as the allowed
models. CSV parsing, validation with located errors, and the bundled copy's paths live here; the
experiments never see a CSV row.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import MILLI_PER_GPU, InstanceId, NodeId
from nomad_gpu.domain.inventory import Gpu, GpuMode, Inventory, Node
from nomad_gpu.domain.requests import AllocAsk, GpuAsk, GpuShare, WholeGpus

BUNDLED = Path(__file__).parent / "data" / "openb"
"""The in-repo copy of the openb trace (see its README for provenance and licence)."""
NODES_CSV = BUNDLED / "openb_node_list_gpu_node.csv"
PODS_CSV = {name: BUNDLED / f"openb_pod_list_{name}.csv" for name in ("default", "gpushare100")}
PUBLISHED_CSV = BUNDLED / "published_allocation_ratio.csv"

_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(InvalidRequest):
    """A trace file that cannot be read or understood (the message names file and line)."""


@dataclass(frozen=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str

    def to_node(self) -> Node:
        gpus = tuple(Gpu(InstanceId(f"{self.name}/gpu{k}"), self.model, mode=GpuMode.FLEX) for k in range(self.gpus))
        return Node(NodeId(self.name), name=self.name, cpu_mhz=self.cpu_milli, memory_mb=self.memory_mib, gpus=gpus)


@dataclass(frozen=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    """Per GPU, clipped to 1000 (as the paper does); 0 for CPU-only tasks."""
    models: frozenset[str] = frozenset()
    spec: str = ""
    """`gpu_spec` as written (empty entries dropped): the paper counts typical tasks by it."""
    creation_time: float = 0.0
    deletion_time: float | None = None
    scheduled_time: float | None = None

    @property
    def gpu(self) -> GpuAsk | None:
        if self.num_gpu == 0 or self.gpu_milli == 0:
            return None
        if self.num_gpu == 1 and self.gpu_milli < MILLI_PER_GPU:
            return GpuShare(self.gpu_milli, self.models)
        return WholeGpus(self.num_gpu, self.models)  # multi-GPU tasks take whole GPUs

    @property
    def gpu_milli_total(self) -> int:
        """What the task asks in milli-GPU (the paper's "arrived" unit)."""
        g = self.gpu
        if g is None:
            return 0
        return round(g.gpu_equivalents * MILLI_PER_GPU)

    def to_ask(self) -> AllocAsk:
        return AllocAsk("task", 0, self.cpu_milli, self.memory_mib, self.gpu)

    @property
    def runtime_s(self) -> float | None:
        """How long it ran in the trace (deletion - scheduled); None if it never ran or has no end."""
        if self.deletion_time is None or self.scheduled_time is None:
            return None
        return max(0.0, self.deletion_time - self.scheduled_time)


@dataclass(frozen=True)
class Trace:
    """A cluster and a task list, each in file order."""

    nodes: tuple[TraceNode, ...]
    pods: tuple[TracePod, ...]

    @cached_property
    def inventory(self) -> Inventory:
        return Inventory.of(n.to_node() for n in self.nodes)

    @property
    def gpu_milli_capacity(self) -> int:
        return sum(n.gpus for n in self.nodes) * MILLI_PER_GPU

    @property
    def gpu_count(self) -> int:
        return sum(n.gpus for n in self.nodes)


def load_trace(nodes_csv: Path, pods_csv: Path) -> Trace:
    nodes = tuple(_nodes(nodes_csv))
    if not nodes:
        raise TraceError(f"{nodes_csv}: no nodes")
    if len({n.name for n in nodes}) != len(nodes):
        raise TraceError(f"{nodes_csv}: node names repeat")
    pods = tuple(_pods(pods_csv))
    if not pods:
        raise TraceError(f"{pods_csv}: no tasks")
    if len({p.name for p in pods}) != len(pods):
        raise TraceError(f"{pods_csv}: task names repeat")
    return Trace(nodes, pods)


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in required if c not in (reader.fieldnames or ())]
            if missing:
                raise TraceError(f"{path}: missing column(s) {', '.join(missing)}")
            for row in reader:
                yield reader.line_num, row
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from exc
    except (csv.Error, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: not a readable CSV file ({exc})") from exc


def _int(path: Path, line: int, row: dict[str, str], column: str, *, low: int = 0) -> int:
    raw = (row.get(column) or "").strip()
    try:
        value = int(float(raw)) if raw else 0
    except ValueError:
        raise TraceError(f"{path}:{line}: {column} is not a number: {raw!r}") from None
    if value < low:
        raise TraceError(f"{path}:{line}: {column} must be >= {low}, got {value}")
    return value


def _time(path: Path, line: int, row: dict[str, str], column: str) -> float | None:
    raw = (row.get(column) or "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise TraceError(f"{path}:{line}: {column} is not a time: {raw!r}") from None


def _nodes(path: Path) -> Iterator[TraceNode]:
    for line, row in _rows(path, _NODE_COLUMNS):
        name = (row["sn"] or "").strip()
        if not name:
            raise TraceError(f"{path}:{line}: empty node name")
        yield TraceNode(name, _int(path, line, row, "cpu_milli"), _int(path, line, row, "memory_mib"),
                        _int(path, line, row, "gpu"), (row["model"] or "").strip())


def _pods(path: Path) -> Iterator[TracePod]:
    for line, row in _rows(path, _POD_COLUMNS):
        name = (row["name"] or "").strip()
        if not name:
            raise TraceError(f"{path}:{line}: empty task name")
        num_gpu = _int(path, line, row, "num_gpu")
        milli = min(_int(path, line, row, "gpu_milli"), MILLI_PER_GPU) if num_gpu else 0
        spec = [m.strip() for m in (row.get("gpu_spec") or "").split("|") if m.strip()]
        yield TracePod(name, _int(path, line, row, "cpu_milli"), _int(path, line, row, "memory_mib"), num_gpu, milli,
                       frozenset(spec), "|".join(spec), _time(path, line, row, "creation_time") or 0.0,
                       _time(path, line, row, "deletion_time"), _time(path, line, row, "scheduled_time"))
