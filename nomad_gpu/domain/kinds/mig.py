"""MIG instances: `count` instances of one profile, each its own device (`<model> MIG <profile>`).

A MIG instance is a whole device with its own memory and compute, so it isolates its tenant and
does not count in the fragmentation measure of GPU milli. Options a re-layout could create (an
instance that does not exist yet, made from idle slices) come from `MigKind.planned`: when set, its
options follow the existing ones, each carrying the re-layout in `Option.plan`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.kinds.base import CountedKind, GpuKind, IndexKey, Option
from nomad_gpu.domain.kinds.migfleet import mig_nearest, mig_room
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.units import SLICES_DEFAULT, MigProfile, split_mig_device_name

if TYPE_CHECKING:
    from nomad_gpu.domain.freeindex import NodeFree
    from nomad_gpu.domain.inventory import Node


class MigKind(CountedKind):
    name = "mig"
    unit = "instances"

    def __init__(self) -> None:
        self.planned: Callable[[NodeFree, MigSlices], Iterator[Option]] | None = None
        """Options a re-layout of the node could create for an ask (each with its `plan`); None:
        only the instances that exist."""

    def free_keys(self, nf: NodeFree) -> Iterable[IndexKey]:
        return [("mig", name, len(ids)) for name, ids in nf.mig_free.items() if ids]

    def static_keys(self, nf: NodeFree) -> Iterable[IndexKey]:
        counts: dict[str, int] = {}
        for m in nf.node.migs:
            if m.healthy:
                counts[m.device_name] = counts.get(m.device_name, 0) + 1
        return [("mig", n, c) for n, c in counts.items()]

    def claims(self, p: AllocPlacement) -> bool:
        return not p.is_share and split_mig_device_name(p.device_name or "") is not None

    def ask_of(self, gpu: object) -> MigSlices | None:
        """``gpu`` as a MIG ask, or None when it asks for another kind (the re-layout planner reads
        the profile and count of the MIG asks only)."""
        return gpu if isinstance(gpu, MigSlices) else None


MIG = MigKind()


@dataclass(frozen=True)
class MigSlices:
    """`count` MIG instances of one profile, e.g. `3g.40gb`."""

    profile: str
    count: int = 1
    models: frozenset[str] = frozenset()

    kind: ClassVar[GpuKind] = MIG

    def __post_init__(self) -> None:
        if self.count < 1:
            raise InvalidRequest("mig.count must be >= 1")
        try:
            parsed = MigProfile.parse(self.profile)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from exc
        object.__setattr__(self, "profile", parsed.name)

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    @property
    def gpu_equivalents(self) -> float:
        return self.count * MigProfile.parse(self.profile).compute_slices / SLICES_DEFAULT

    def need(self) -> int:
        return self.count

    def allows_name(self, name: str) -> bool:
        split = split_mig_device_name(name)
        return split is not None and split[1] == self.profile and self.allows(split[0])

    def options(self, nf: NodeFree) -> Iterator[Option]:
        for name, ids in sorted(nf.mig_free.items()):
            split = split_mig_device_name(name)
            if split is None or split[1] != self.profile or not self.allows(split[0]) or len(ids) < self.count:
                continue
            yield Option(tuple(ids[: self.count]), name)
        if MIG.planned is not None:
            yield from MIG.planned(nf, self)

    def left_after(self, nf: NodeFree, opt: Option) -> int:
        return len(nf.mig_free.get(opt.device_name or "", ())) - self.count

    def capacity(self, nf: NodeFree) -> int:
        return len(nf.node.migs)

    def prefer_tight(self, nf: NodeFree, opt: Option) -> float:
        return 0.0

    def fragment_shape(self) -> tuple[int, int] | None:
        return None

    def describe(self) -> str:
        return f"{self.count} x MIG {self.profile}"

    def limits(self) -> list[str]:
        return []

    def room_on(self, node: Node) -> dict[Hashable, int]:
        return {("mig", model, self.profile): n for model, n in mig_room(self, node).items()}

    def room_units(self) -> int:
        return self.count

    def never_on(self, scope: Sequence[Node]) -> str | None:
        return mig_nearest(self, scope)
