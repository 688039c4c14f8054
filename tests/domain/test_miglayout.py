"""MIG geometry: valid placements per profile table, the layout syntax, the arrangement rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.miglayout import (
    GEOMETRIES,
    MigGeometry,
    Placed,
    arrange,
    arrangements,
    check_layout,
    fill,
    format_layout,
    geometry_for,
    parse_layout,
)

_H100 = geometry_for("NVIDIA H100 80GB HBM3", [("3g.40gb", 4)])
assert _H100 is not None
H100: MigGeometry = _H100
A30 = next(g for g in GEOMETRIES if g.memory_slices == 4)


def test_arrangement_rule_largest_first_lowest_start_with_backtracking() -> None:
    # 3g@0 first leaves 2g@4 and 1g@6 and no room for the second 1g: the rule backtracks to 3g@4.
    got = arrange(H100, ["1g.10gb", "3g.40gb", "1g.10gb", "2g.20gb"])
    assert got is not None and format_layout(got) == "2g.20gb@0,1g.10gb@2,1g.10gb@3,3g.40gb@4"


def test_arrangement_fails_when_no_valid_placement_exists() -> None:
    assert arrange(H100, ["3g.40gb", "3g.40gb", "1g.10gb"]) is None
    assert arrange(H100, ["4g.40gb", "4g.40gb"]) is None  # at most one, and only at 0
    assert arrange(H100, ["1g.10gb"] * 8) is None  # slice 7 takes no 1g


def test_fixed_instances_stay_and_block_their_slices() -> None:
    fixed = [Placed(4, 1, "1g.10gb")]
    assert arrange(H100, ["3g.40gb"], fixed) == (Placed(0, 4, "3g.40gb"),)
    assert arrange(H100, ["3g.40gb", "3g.40gb"], fixed) is None


@pytest.mark.parametrize(("text", "why"), [
    pytest.param("3g.40gb@2", "may start only at slice 0, 4", id="3g-at-2"),
    pytest.param("3g.40gb@0,2g.20gb@2", "overlap", id="overlap"),
    pytest.param("3g.20gb@0", "not a 80GB", id="other-sku-profile"),
    pytest.param("3g.40gb", "profile@start", id="no-start"),
    pytest.param("4g.40gb@0,4g.40gb@4", "may start only at slice 0", id="4g-at-4"),
    pytest.param("1g.10gb+me@0,1g.10gb+me@1", "more than 1", id="two-media-engines"),
])
def test_bad_layouts_are_refused_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(InvalidRequest, match=why):
        parse_layout(text, H100)


def test_layout_text_round_trips_and_empty_is_no_instances() -> None:
    text = "3g.40gb@0,1g.10gb@4,1g.10gb@5,1g.10gb@6"
    assert format_layout(parse_layout(text, H100)) == text
    assert parse_layout("", H100) == ()


def test_geometry_is_told_apart_by_instance_size_where_names_collide() -> None:
    # 1g.10gb is one slice on an 80 GB part and the two-slice 1g on an A100 40GB.
    h100 = geometry_for("NVIDIA H100 80GB HBM3", [("1g.10gb", 1)])
    a100 = geometry_for("NVIDIA A100-SXM4-40GB", [("1g.10gb", 2)])
    assert h100 is not None and h100.family.startswith("80GB")
    assert a100 is not None and a100.family == "A100-40GB"
    assert geometry_for("NVIDIA A30", [("2g.12gb", 2)]) == A30
    assert geometry_for("NVIDIA H100 80GB HBM3", [("3g.20gb", 4), ("3g.40gb", 4)]) is None
    assert geometry_for("NVIDIA H100 80GB HBM3", []) is None


def test_fill_puts_small_profiles_high_and_keeps_valid() -> None:
    got = fill(H100, [Placed(0, 4, "3g.40gb")], ["1g.10gb"])
    assert format_layout(got) == "3g.40gb@0,1g.10gb@4,1g.10gb@5,1g.10gb@6"


@given(geometry=st.sampled_from(GEOMETRIES), data=st.data())
def test_every_arrangement_is_valid_and_leaves_fixed_alone(geometry: MigGeometry, data: st.DataObject) -> None:
    names = [s.name for s in geometry.shapes]
    fixed_profiles = data.draw(st.lists(st.sampled_from(names), max_size=3))
    fixed = arrange(geometry, fixed_profiles) or ()
    wanted = data.draw(st.lists(st.sampled_from(names), max_size=4))
    seen = set()
    for arr in arrangements(geometry, wanted, fixed):
        assert arr not in seen  # each arrangement once
        seen.add(arr)
        assert sorted(p.profile for p in arr) == sorted(wanted)
        assert check_layout(geometry, [*fixed, *arr]) is None
    first = arrange(geometry, wanted, fixed)
    assert (first is None) == (not seen)
