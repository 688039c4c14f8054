"""MIG geometry: which profile may sit where on a GPU, and whether a layout is valid.

Free memory slices alone do not say what fits: every profile has fixed start slices (on the 7-slice
family 3g only at 0 or 4, 4g and 7g only at 0, 2g at 0, 2 or 4), and GPU instances may not overlap
(reference/nvml-mig.md section 3.1; NVML's `nvmlDeviceCreateGpuInstanceWithPlacement` fails on an
overlap). A layout is a set of `profile@start` placements; this module checks one, parses and prints
the `3g.40gb@0,3g.40gb@4` form the node-side apply command takes, and arranges a list of profiles by
a fixed rule (largest first, lowest start first, backtracking). The planner (`migplanner.py`) builds on
these; nothing here knows about queues or nodes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from nomad_gpu.domain.errors import InvalidRequest


@dataclass(frozen=True)
class ProfileShape:
    """One GPU-instance profile of a GPU family: its size and where it may start, in memory slices."""

    name: str
    compute: int
    size: int
    starts: tuple[int, ...]
    max_count: int


@dataclass(frozen=True)
class MigGeometry:
    """A GPU family's profile table (names differ per SKU, placements per slice count)."""

    family: str
    memory_slices: int
    shapes: tuple[ProfileShape, ...]

    def shape(self, profile: str) -> ProfileShape | None:
        return next((s for s in self.shapes if s.name == profile), None)

    @property
    def smallest(self) -> ProfileShape:
        """The profile that fills the most slices (1g): what keeps free capacity visible to Nomad."""
        return min((s for s in self.shapes if "+" not in s.name), key=lambda s: (s.size, s.compute))


@dataclass(frozen=True, order=True)
class Placed:
    """An instance's placement: `profile@start`, `size` memory slices from `start`."""

    start: int
    size: int
    profile: str

    @property
    def slices(self) -> range:
        return range(self.start, self.start + self.size)

    def overlaps(self, other: Placed) -> bool:
        return self.start < other.start + other.size and other.start < self.start + self.size

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}"


def _seven_slice(family: str, g1: int, g1x2: int, g2: int, g3: int, g4: int, g7: int) -> MigGeometry:
    # Section 3.2 of reference/nvml-mig.md: one geometry for A100, H100, H100 NVL, H200, B200, GB200.
    base = (
        ProfileShape(f"1g.{g1}gb", 1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
        ProfileShape(f"1g.{g1x2}gb", 1, 2, (0, 2, 4, 6), 4),
        ProfileShape(f"2g.{g2}gb", 2, 2, (0, 2, 4), 3),
        ProfileShape(f"3g.{g3}gb", 3, 4, (0, 4), 2),
        ProfileShape(f"4g.{g4}gb", 4, 4, (0,), 1),
        ProfileShape(f"7g.{g7}gb", 7, 8, (0,), 1),
    )
    me = ProfileShape(f"1g.{g1}gb+me", 1, 1, (0, 1, 2, 3, 4, 5, 6), 1)  # one media-engine set per GPU
    return MigGeometry(family, 8, (*base, me))


# Section 3.3 of reference/nvml-mig.md (names per SKU).
GEOMETRIES: tuple[MigGeometry, ...] = (
    _seven_slice("A100-40GB", 5, 10, 10, 20, 20, 40),
    _seven_slice("80GB (A100-80GB, H100-80GB)", 10, 20, 20, 40, 40, 80),
    _seven_slice("H100 NVL", 12, 24, 24, 47, 47, 94),
    _seven_slice("GH200 H100-96GB", 12, 24, 24, 48, 48, 96),
    _seven_slice("H200-141GB", 18, 35, 35, 71, 71, 141),
    _seven_slice("B200-180GB", 23, 45, 45, 90, 90, 180),
    _seven_slice("GB200", 23, 47, 47, 93, 93, 186),
    # Section 3.4: the A30 has 4 memory slices.
    MigGeometry("A30-24GB", 4, (
        ProfileShape("1g.6gb", 1, 1, (0, 1, 2, 3), 4),
        ProfileShape("1g.6gb+me", 1, 1, (0, 1, 2, 3), 1),
        ProfileShape("2g.12gb", 2, 2, (0, 2), 2),
        ProfileShape("4g.24gb", 4, 4, (0,), 1),
    )),
)


def geometry_for(model: str, seen: Iterable[tuple[str, int | None]]) -> MigGeometry | None:
    """The profile table of a GPU, from its model name and the (profile, size) of instances it has.

    Profile names alone can be ambiguous (`1g.10gb` is one slice on an 80 GB part and two on an A100
    40 GB), so a size, where known, must match too. None when no table fits everything seen.
    """
    pairs = list(seen)
    a30 = "A30" in model.upper()
    fits = [g for g in GEOMETRIES if (g.memory_slices == 4) == a30 and pairs and all(
        (shape := g.shape(p)) is not None and (size is None or shape.size == size) for p, size in pairs)]
    return fits[0] if len(fits) == 1 else None


def check_layout(geometry: MigGeometry, layout: Iterable[Placed]) -> str | None:
    """Why `layout` cannot exist on this GPU, or None when it can."""
    placed = sorted(layout)
    counts: Counter[str] = Counter()
    for p in placed:
        shape = geometry.shape(p.profile)
        if shape is None:
            return f"{p.profile} is not a {geometry.family} profile"
        if p.size != shape.size or p.start not in shape.starts:
            starts = ", ".join(map(str, shape.starts))
            return f"{p}: {p.profile} may start only at slice {starts} ({shape.size} slices)"
        counts[p.profile] += 1
        if counts[p.profile] > shape.max_count:
            return f"more than {shape.max_count} {p.profile} on one GPU"
    for a, b in zip(placed, placed[1:], strict=False):
        if a.overlaps(b):
            return f"{a} and {b} overlap"
    return None


def parse_layout(text: str, geometry: MigGeometry) -> tuple[Placed, ...]:
    """`3g.40gb@0,3g.40gb@4` (or an empty string: no instances) into placements; InvalidRequest if bad."""
    out: list[Placed] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        m = re.fullmatch(r"(?P<profile>[0-9a-z.+-]+)@(?P<start>\d)", item.lower())
        if m is None:
            raise InvalidRequest(f"layout item {item!r} is not profile@start, e.g. 3g.40gb@4")
        shape = geometry.shape(m["profile"])
        if shape is None:
            raise InvalidRequest(f"layout item {item!r}: {m['profile']} is not a {geometry.family} profile")
        out.append(Placed(int(m["start"]), shape.size, shape.name))
    why = check_layout(geometry, out)
    if why is not None:
        raise InvalidRequest(f"invalid layout: {why}")
    return tuple(sorted(out))


def format_layout(layout: Iterable[Placed]) -> str:
    return ",".join(str(p) for p in sorted(layout))


def arrangements(geometry: MigGeometry, profiles: Sequence[str],
                 fixed: Sequence[Placed] = ()) -> Iterator[tuple[Placed, ...]]:
    """Every way to place `profiles` beside `fixed` (which stay where they are), largest profile first
    and lowest start first; each arrangement once (equal profiles take increasing starts)."""
    shapes = sorted((_shape(geometry, p) for p in profiles), key=lambda s: (-s.size, -s.compute, s.name))
    counts = Counter(p.profile for p in fixed)
    if any(counts[s.name] + sum(1 for t in shapes if t.name == s.name) > s.max_count for s in shapes):
        return
    taken = [False] * geometry.memory_slices
    for p in fixed:
        for i in p.slices:
            if i < len(taken):
                taken[i] = True
    chosen: list[Placed] = []

    def place(k: int, lowest: int) -> Iterator[tuple[Placed, ...]]:
        if k == len(shapes):
            yield tuple(sorted(chosen))
            return
        shape = shapes[k]
        for start in shape.starts:
            if start < lowest or start + shape.size > geometry.memory_slices:
                continue
            if any(taken[start:start + shape.size]):
                continue
            for i in range(start, start + shape.size):
                taken[i] = True
            chosen.append(Placed(start, shape.size, shape.name))
            same_next = k + 1 < len(shapes) and shapes[k + 1].name == shape.name
            yield from place(k + 1, start + 1 if same_next else 0)
            chosen.pop()
            for i in range(start, start + shape.size):
                taken[i] = False

    yield from place(0, 0)


def arrange(geometry: MigGeometry, profiles: Sequence[str], fixed: Sequence[Placed] = ()) -> tuple[Placed, ...] | None:
    """The first arrangement by the fixed rule, or None when the profiles cannot all be placed.

    `["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]` gives 3g@4, 2g@0, 1g@2, 1g@3 (3g@0 leaves no room).
    """
    return next(arrangements(geometry, profiles, fixed), None)


def fill(geometry: MigGeometry, layout: Sequence[Placed], profiles: Sequence[str]) -> tuple[Placed, ...]:
    """`layout` plus as many of `profiles` (in the order given, each as often as it fits, highest start
    first so that the large profiles' low starts stay open) as still fit."""
    out = list(layout)
    for name in profiles:
        shape = _shape(geometry, name)
        for start in sorted(shape.starts, reverse=True):
            candidate = Placed(start, shape.size, shape.name)
            if start + shape.size <= geometry.memory_slices and check_layout(geometry, [*out, candidate]) is None:
                out.append(candidate)
    return tuple(sorted(out))


def _shape(geometry: MigGeometry, profile: str) -> ProfileShape:
    shape = geometry.shape(profile)
    if shape is None:
        raise InvalidRequest(f"{profile} is not a {geometry.family} profile")
    return shape
