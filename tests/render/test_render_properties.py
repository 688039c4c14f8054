"""Property: whatever text a user puts in a spec, the HCL says exactly that and nothing more.

For arbitrary text in every free-text field (env values, meta values, args, image,
command, datacenters) and arbitrary identifiers where keys are allowed, the rendered
job parses with python-hcl2, keeps its shape (no injected blocks or attributes), and
every value decodes back to the original string exactly. No restriction on the text
is needed: ``hcl_string`` writes an unbalanced ``${`` as ``\\u0024{`` precisely so
that python-hcl2, whose ``$${`` token needs a later ``}``, reads it correctly too.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nomad_gpu.render import GroupPlacement, JobSpec, RenderPlacement, render_job

from .hclview import MARKERS, attrs, labelled, only, parse_job, target, text
from .test_hcl_escaping import hostile_text

env_keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True).filter(
    lambda key: key != "NVIDIA_VISIBLE_DEVICES"
)
meta_keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,12}", fullmatch=True).filter(
    lambda key: not key.startswith("nomad_gpu_")
)
# Nomad IDs are printable and without spaces; everything else about them is escaped.
printable_id = st.text(st.characters(exclude_categories=("C", "Z")), min_size=1, max_size=24)
# what a spec may hold: any text but NUL (a task's env and arguments are C strings; the spec refuses it)
spec_text = hostile_text.map(lambda s: s.replace("\x00", ""))
non_empty = spec_text.filter(bool)


@st.composite
def specs(draw: st.DrawFn) -> tuple[JobSpec, RenderPlacement, str]:
    kind = draw(st.sampled_from(["gpu", "share", "none"]))
    group: dict[str, Any] = {
        "name": "g",
        "task": {
            "image": draw(non_empty),
            "command": draw(non_empty),
            "args": draw(st.lists(spec_text, max_size=4)),
            "env": draw(st.dictionaries(env_keys, spec_text, max_size=4)),
        },
    }
    if kind == "gpu":
        group["gpu"] = {"count": 2}
        ids = tuple(draw(st.lists(printable_id.filter(lambda s: "," not in s), min_size=2, max_size=2, unique=True)))
        placed = GroupPlacement("g", draw(non_empty), ids)
    elif kind == "share":
        group["share"] = {"milli": 500}
        placed = GroupPlacement("g", None, (), share_gpu=draw(printable_id.filter(lambda s: "," not in s)))
    else:
        placed = GroupPlacement("g", None, ())
    spec = JobSpec.model_validate(
        {
            "name": "prop",
            "datacenters": draw(st.lists(non_empty, min_size=1, max_size=3)),
            "meta": draw(st.dictionaries(meta_keys, spec_text, max_size=4)),
            "groups": [group],
        }
    )
    return spec, RenderPlacement(draw(printable_id), (placed,)), draw(printable_id)


@given(specs(), st.dictionaries(st.from_regex(r"nomad_gpu_[a-z]{1,8}", fullmatch=True), spec_text, max_size=2))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_user_value_round_trips_exactly(
    case: tuple[JobSpec, RenderPlacement, str], extra_meta: dict[str, str]
) -> None:
    spec, placement, job_id = case
    parsed_id, job = parse_job(render_job(spec, job_id=job_id, placement=placement, extra_meta=extra_meta))
    assert parsed_id == job_id

    assert {key for key in job if key not in MARKERS} == {
        "type", "priority", "datacenters", "namespace", "meta", "constraint", "group"
    }  # fmt: skip
    assert [text(dc) for dc in job["datacenters"]] == spec.datacenters
    meta = attrs(only(job, "meta"))
    assert {key: meta[key] for key in spec.meta} == spec.meta
    assert {key: meta[key] for key in extra_meta} == extra_meta
    (pin,) = job["constraint"]
    assert (target(pin["attribute"]), text(pin["value"])) == ("${node.unique.id}", placement.node_id)

    (group,) = spec.groups
    task = labelled(labelled(job, "group")["g"], "task")["g"]
    config = only(task, "config")
    assert text(config["image"]) == group.task.image
    assert text(config["command"]) == group.task.command
    assert [text(arg) for arg in config.get("args", [])] == group.task.args
    env = attrs(only(task, "env")) if "env" in task else {}
    placed = placement.groups[0]
    expected_env = dict(group.task.env)
    if placed.share_gpu is not None:
        expected_env["NVIDIA_VISIBLE_DEVICES"] = placed.share_gpu
    elif group.capacity_kind is None:
        expected_env["NVIDIA_VISIBLE_DEVICES"] = "void"  # no GPU booked: the container must see none
    assert env == expected_env

    devices = labelled(only(task, "resources"), "device")
    if placed.device_name is None:
        assert devices == {}
    else:
        assert list(devices) == [placed.device_name]
        (device_pin,) = devices[placed.device_name]["constraint"]
        assert target(device_pin["attribute"]) == "${device.ids}"
        assert text(device_pin["value"]).split(",") == list(placed.device_ids)
