"""A fourth GPU kind, defined here and nowhere else: a user's spec asks for it by its own field over the
HTTP API, the core places it, the ledger books it and the renderer emits its device block, through the
public registries alone (domain/kinds `register`, render/speckinds `register_spec_kind`,
service/asks/kindasks `register_ask`, render/devices `register_device`).

The kind: a slice of a shared GPU's memory, asked in MiB (like a vGPU profile) as `vram: {mib: N}`,
booked as the share of the GPU's time its memory stands for, and rendered as a `nomad-gpu/vram/<model>`
device.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, Field, StrictInt
from starlette.testclient import TestClient

from nomad_gpu.domain import kinds
from nomad_gpu.domain.cycle import Admit, CycleConfig, Wait, run_cycle
from nomad_gpu.domain.ids import MILLI_PER_GPU, EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Gpu, GpuMode, Inventory, Node
from nomad_gpu.domain.kinds import GpuKind, IndexKey, Option
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement, NoFit, WaitReason
from nomad_gpu.domain.requests import AllocAsk, JobRequest
from nomad_gpu.render import GroupPlacement, JobSpec, RenderPlacement, parse_spec, render_job
from nomad_gpu.render.devices import GroupContext, Placed, device_adapter, register_device, unregister_device
from nomad_gpu.render.groupspec import GroupSpec
from nomad_gpu.render.speckinds import SpecKind, register_spec_kind, unregister_spec_kind
from nomad_gpu.service.asks.kindasks import register_ask, unregister_ask
from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.life.actuator import JobState
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import QueueEntry, SqliteStore

if TYPE_CHECKING:
    from nomad_gpu.domain.freeindex import NodeFree

MODEL = "NVIDIA L40S"


def _milli(gpu: Gpu, mib: int) -> int:
    return -(-mib * MILLI_PER_GPU // gpu.memory_mib)


def _free_mib(nf: NodeFree, gid: InstanceId) -> int:
    return nf.gpu_free[gid] * nf.gpus[gid].memory_mib // MILLI_PER_GPU


class VramKind:
    name = "vram"
    spatial = False
    sized = False

    def free_keys(self, nf: NodeFree) -> Iterable[IndexKey]:
        best: dict[str, int] = {}
        for gid, g in nf.gpus.items():
            if g.mode.takes_shares:
                best[g.model] = max(best.get(g.model, 0), _free_mib(nf, gid))
        return [("vram", m, v) for m, v in best.items() if v > 0]

    def static_keys(self, nf: NodeFree) -> Iterable[IndexKey]:
        return [("vram", g.model, g.memory_mib) for g in nf.gpus.values() if g.mode.takes_shares]

    def shortfall(self, what: str, need: int, total: int, largest: int, limits: str) -> NoFit:
        return NoFit(WaitReason.INSUFFICIENT, f"no shared GPU has {need} MiB free{limits}")

    def claims(self, p: AllocPlacement) -> bool:
        return False


VRAM = VramKind()


@dataclass(frozen=True)
class VramSlice:
    mib: int
    models: frozenset[str] = frozenset()

    kind: ClassVar[GpuKind] = VRAM

    @property
    def count(self) -> int:
        return 1

    @property
    def gpu_equivalents(self) -> float:
        return self.mib / 81_920

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    def need(self) -> int:
        return self.mib

    def allows_name(self, name: str) -> bool:
        return self.allows(name)

    def options(self, nf: NodeFree) -> Iterator[Option]:
        for gid, g in nf.gpus.items():
            if g.mode.takes_shares and self.allows(g.model) and _free_mib(nf, gid) >= self.mib:
                yield Option((gid,), g.model, _milli(g, self.mib))

    def left_after(self, nf: NodeFree, opt: Option) -> int:
        return nf.gpu_free[opt.shared_gpu] - opt.share_milli

    def capacity(self, nf: NodeFree) -> int:
        return MILLI_PER_GPU

    def prefer_tight(self, nf: NodeFree, opt: Option) -> float:
        return -float(nf.gpu_free[opt.shared_gpu])

    def fragment_shape(self) -> tuple[int, int] | None:
        return None

    def describe(self) -> str:
        return f"{self.mib} MiB of a shared GPU"

    def limits(self) -> list[str]:
        return []

    def room_on(self, node: Node) -> dict[Hashable, int]:
        return {("vram", g.id): g.memory_mib for g in node.gpus if g.mode.takes_shares and self.allows(g.model)}

    def room_units(self) -> int:
        return self.mib

    def never_on(self, scope: Sequence[Node]) -> str | None:
        if any(self.mib <= m for n in scope for m in self.room_on(n).values()):
            return None
        return f"{self.mib} MiB of one shared GPU asked for; no shared GPU here has that much"


class VramDevices:
    kind = "vram"

    def group_placement(self, group: str, placed: Sequence[Placed], vendor: str) -> GroupPlacement:
        (p,) = placed
        return GroupPlacement(group, f"nomad-gpu/vram/{p.device_name}", p.instance_ids, kind=self.kind)

    def check(self, group: GroupSpec, placed: GroupPlacement, where: str) -> None:
        assert placed.device_name and len(placed.device_ids) == 1, where

    def render(self, group: GroupSpec, placed: GroupPlacement, ctx: GroupContext) -> None:
        ctx.device = {"name": placed.device_name, "count": 1, "ids": ",".join(placed.device_ids)}


class VramField(BaseModel):
    """The spec's `vram:` field: MiB of one shared GPU's memory."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    mib: Annotated[StrictInt, Field(ge=1)]


def _vram_ask(value: Any, need: int | None) -> VramSlice:
    return VramSlice(value.mib)


@pytest.fixture
def vram() -> Iterator[None]:
    kinds.register(VRAM)
    register_device(VramDevices())
    register_spec_kind(SpecKind("vram", "vram", VramField))
    register_ask("vram", _vram_ask)
    try:
        yield
    finally:
        kinds.unregister("vram")
        unregister_device("vram")
        unregister_spec_kind("vram")
        unregister_ask("vram")


def _job(entry: str, mib: int) -> JobRequest:
    return JobRequest(EntryId(entry), Team("a"), (AllocAsk("main", 0, 1000, 1024, VramSlice(mib)),))


def test_a_fourth_kind_is_placed_booked_and_rendered(vram: None) -> None:
    gpu = Gpu(InstanceId("GPU-v0"), MODEL, 49_152, mode=GpuMode.SHARED)
    node = Node(NodeId("n1"), name="n1", cpu_mhz=16_000, memory_mb=65_536, gpus=(gpu,))
    ledger = Ledger(Inventory.of([node]))
    config = CycleConfig(policy="frag-aware")

    # the core places it
    first = run_cycle(ledger, [_job("j1", 12_288)], now=0.0, config=config)
    (admit,) = first.decisions
    assert isinstance(admit, Admit)
    (p,) = admit.placements
    assert (p.kind, p.node, p.instance_ids, p.share_milli) == ("vram", "n1", ("GPU-v0",), 250)
    assert kinds.kind_of(p) is VRAM

    # the ledger books it: a quarter of the GPU is taken, and what no longer fits waits, in the kind's words
    free = ledger.node_free(NodeId("n1"))
    assert free is not None and free.gpu_free[InstanceId("GPU-v0")] == 750
    second = run_cycle(ledger, [_job("j2", 40_000)], now=0.0, config=config)
    (wait,) = second.decisions
    assert isinstance(wait, Wait) and wait.detail == "no shared GPU has 40000 MiB free"
    ledger.release(EntryId("j1"))
    assert ledger.node_free(NodeId("n1")).gpu_free[InstanceId("GPU-v0")] == 1000  # type: ignore[union-attr]

    # the renderer emits its device block
    spec = parse_spec({"name": "infer", "team": "a", "task": {"image": "i", "driver": "docker"}})
    assert isinstance(spec, JobSpec)
    placed = device_adapter(p.kind).group_placement("main", [Placed(p.instance_ids, p.device_name)], "nvidia")
    hcl = render_job(spec, job_id="infer-1", placement=RenderPlacement("n1", (placed,)))
    assert f'device "nomad-gpu/vram/{MODEL}"' in hcl
    assert '"GPU-v0"' in hcl and "NVIDIA_VISIBLE_DEVICES" not in hcl


def test_without_its_registration_the_kind_is_not_offered() -> None:
    gpu = Gpu(InstanceId("GPU-v0"), MODEL, 49_152, mode=GpuMode.SHARED)
    ledger = Ledger(Inventory.of([Node(NodeId("n1"), cpu_mhz=16_000, memory_mb=65_536, gpus=(gpu,))]))
    (wait,) = run_cycle(ledger, [_job("j1", 1024)], now=0.0, config=CycleConfig()).decisions
    assert isinstance(wait, Wait) and wait.reason is WaitReason.NO_SUCH_SHAPE


class RenderingNomad:
    """The actuator's Nomad, reduced to what a register sends: each job's HCL, rendered as the real
    actuator renders it."""

    def __init__(self) -> None:
        self.hcl: dict[str, str] = {}

    def submit(self, entry: QueueEntry, spec: JobSpec, placement: RenderPlacement) -> str:
        self.hcl[entry.nomad_job_id] = render_job(spec, job_id=entry.nomad_job_id, placement=placement)
        return self.hcl[entry.nomad_job_id]

    def stop(self, job_id: str, namespace: str = "default") -> None:
        return None

    def job_state(self, job_id: str, namespace: str = "default") -> JobState | None:
        return None

    def ping(self) -> None:
        return None


class Queue:
    """Work for the actuator pool, run when the test says."""

    def __init__(self) -> None:
        self.tasks: list[tuple[Any, tuple[Any, ...]]] = []

    def submit(self, fn: Any, /, *args: Any) -> None:
        self.tasks.append((fn, args))

    def run_all(self) -> None:
        while self.tasks:
            fn, args = self.tasks.pop(0)
            fn(*args)


SPEC = """
name: infer
team: a
task: {image: i, driver: docker}
vram: {mib: 12288}
"""


def test_a_user_spec_asks_for_the_fourth_kind_over_the_http_api(vram: None) -> None:
    nomad, pool = RenderingNomad(), Queue()
    svc = SchedulerService(SqliteStore(), nomad, SchedulingSettings(tick_s=0.01), clock=lambda: 1000.0,
                           executor=pool)
    gpu = Gpu(InstanceId("GPU-v0"), MODEL, 49_152, mode=GpuMode.SHARED)
    svc.on_resync([Node(NodeId("n1"), name="n1", cpu_mhz=16_000, memory_mb=65_536, gpus=(gpu,))], [])
    client = TestClient(create_app(svc))

    r = client.post("/v1/jobs", content=SPEC, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    (entry,) = r.json()["entries"]
    assert entry["spec"]["groups"][0]["vram"] == {"mib": 12288}  # stored as written, read back by its model
    svc.run_cycle()
    pool.run_all()

    got = client.get(f"/v1/jobs/{entry['id']}").json()
    (placed,) = got["placements"]
    assert (placed["node"], placed["instance_ids"], placed["share_milli"]) == ("n1", ["GPU-v0"], 250)
    hcl = nomad.hcl[got["nomad_job_id"]]
    assert f'device "nomad-gpu/vram/{MODEL}"' in hcl and '"GPU-v0"' in hcl


@pytest.mark.parametrize(("text", "words"), [
    pytest.param("vram: {mib: 0}\n", "vram.mib: Input should be greater than or equal to 1", id="its-model"),
    pytest.param("vram: {mib: 1024}\nshare: {milli: 250}\n",
                 "set at most one of gpu, mig, share, vram (got share and vram)", id="one-kind"),
])
def test_the_fourth_kinds_field_is_validated_like_the_others(vram: None, text: str, words: str) -> None:
    svc = SchedulerService(SqliteStore(), RenderingNomad(), SchedulingSettings(tick_s=0.01), clock=lambda: 1000.0,
                           executor=Queue())
    r = TestClient(create_app(svc)).post("/v1/jobs", content="name: x\nteam: a\ntask: {image: i}\n" + text,
                                         headers={"Content-Type": "application/yaml"})
    assert r.status_code == 400 and words in r.json()["error"], r.text


def test_without_its_registration_a_spec_cannot_name_it() -> None:
    svc = SchedulerService(SqliteStore(), RenderingNomad(), SchedulingSettings(tick_s=0.01), clock=lambda: 1000.0,
                           executor=Queue())
    r = TestClient(create_app(svc)).post("/v1/jobs", content=SPEC, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 400 and "vram: unknown field" in r.json()["error"], r.text
