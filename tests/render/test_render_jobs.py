"""Rendering: every example spec becomes a parseable, pinned Nomad job of the allowed shape."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from nomad_gpu.render import (
    GroupPlacement,
    JobRenderer,
    JobSpec,
    RenderError,
    RenderPlacement,
    ServiceJobSettings,
    SweepSpec,
    expand_sweep,
    load_spec,
    render_job,
    render_service_job,
)

from .hclview import attrs, labelled, only, parse_job, target, text
from .helpers import A100, A100_MIG, JOBSPECS, NODE, TEMPLATES, placement_for

# The stanzas the embedded dev cluster maps (and nothing else may appear).
ALLOWED: dict[str, set[str]] = {
    "job": {"type", "priority", "datacenters", "namespace", "node_pool", "region", "meta", "constraint", "group"},
    "group": {"count", "meta", "constraint", "restart", "reschedule", "task", "volume", "network", "service"},
    "network": {"mode", "port"},
    "port": {"static", "to", "host_network"},
    "service": {"name", "port", "provider", "tags", "check"},
    "check": {"name", "type", "path", "protocol", "interval", "timeout", "tls_skip_verify", "header"},
    "template": {"destination", "data", "env", "error_on_missing_key"},
    "volume": {"type", "source", "read_only"},
    "volume_mount": {"volume", "destination", "read_only"},
    "restart": {"attempts", "mode", "delay", "interval"},
    "reschedule": {"attempts", "unlimited"},
    "task": {"driver", "config", "env", "meta", "kill_timeout", "kill_signal", "resources", "volume_mount", "template",
             "service"},
    "resources": {"cpu", "memory", "memory_max", "device"},
    "device": {"count", "constraint", "affinity"},
    "constraint": {"attribute", "operator", "value"},
    "affinity": {"attribute", "operator", "value", "weight"},
}
LABELLED = {"group", "task", "device", "volume", "port"}


def assert_allowed_shape(kind: str, body: dict[str, Any]) -> None:
    """Recursively check that ``body`` (a ``kind`` block) only uses allowed stanzas."""
    keys = {key for key in body if not key.startswith("__")}
    assert keys <= ALLOWED[kind], f"{kind} uses {sorted(keys - ALLOWED[kind])}"
    for key in keys:
        if not isinstance(body[key], list) or not all(isinstance(b, dict) for b in body[key]):
            continue  # an argument (volume_mount's `volume = "queue"`), not a block
        if key in LABELLED:
            for inner in labelled(body, key).values():
                assert_allowed_shape(key, inner)
        elif key in ("meta", "env"):
            (block,) = body[key]
            assert all(isinstance(v, str) for k, v in block.items() if not k.startswith("__")), block
        elif key == "header":  # a check's HTTP headers: each a list of strings
            (block,) = body[key]
            assert all(isinstance(v, list) and all(isinstance(i, str) for i in v)
                       for k, v in block.items() if not k.startswith("__")), block
        elif key in ALLOWED and key != "config":
            for inner in body[key]:
                assert_allowed_shape(key, inner)


def render(spec: JobSpec, job_id: str = "job-1", **extra: str) -> tuple[str, dict[str, Any]]:
    source = render_job(spec, job_id=job_id, placement=placement_for(spec), extra_meta=extra)
    return parse_job(source)


def jobs_of(path: Path) -> list[JobSpec]:
    spec = load_spec(path)
    return expand_sweep(spec) if isinstance(spec, SweepSpec) else [spec]


EXAMPLES = sorted(JOBSPECS.glob("*.yaml"))


def test_the_example_specs_are_all_there() -> None:
    assert {path.name for path in EXAMPLES} >= {
        "train.yaml",
        "train-multi.yaml",
        "inference-mig.yaml",
        "notebook-share.yaml",
        "sweep.yaml",
        "gang.yaml",
    }


@pytest.mark.parametrize("path", [pytest.param(path, id=path.stem) for path in EXAMPLES])
def test_every_example_renders_pinned_and_parses(path: Path) -> None:
    for spec in jobs_of(path):
        placement = placement_for(spec)
        source = render_job(spec, job_id=f"{spec.name}-e1", placement=placement, extra_meta={"nomad_gpu_entry": "e1"})
        job_id, job = parse_job(source)
        assert job_id == f"{spec.name}-e1"
        assert_allowed_shape("job", job)
        (node_pin,) = job["constraint"]
        assert target(node_pin["attribute"]) == "${node.unique.id}"
        assert text(node_pin["value"]) == NODE
        assert "operator" not in node_pin
        assert attrs(only(job, "meta"))["nomad_gpu_entry"] == "e1"
        groups = labelled(job, "group")
        assert list(groups) == [group.name for group in spec.groups]
        for group in spec.groups:
            body = groups[group.name]
            assert body["count"] == group.count
            assert only(body, "restart") == {"attempts": 0, "mode": '"fail"', "__is_block__": True}
            assert only(body, "reschedule") == {"attempts": 0, "unlimited": False, "__is_block__": True}
            resources = only(labelled(body, "task")[group.name], "resources")
            placed = placement.for_group(group.name)
            devices = labelled(resources, "device")
            if placed.device_name is None:
                assert devices == {}
                continue
            device = devices[placed.device_name]
            assert device["count"] == group.device_count
            (pin,) = device["constraint"]
            assert target(pin["attribute"]) == "${device.ids}"
            assert text(pin["operator"]) == "set_contains_any"
            assert text(pin["value"]) == ",".join(placed.device_ids)


def test_train_pins_one_whole_gpu() -> None:
    spec = load_spec(JOBSPECS / "train.yaml")
    assert isinstance(spec, JobSpec)
    _, job = render(spec)
    assert text(job["type"]) == "batch"
    task = labelled(labelled(job, "group")["main"], "task")["main"]
    config = only(task, "config")
    assert text(config["image"]) == "nvcr.io/nvidia/pytorch:24.05-py3"
    assert text(config["command"]) == "python"
    assert [text(arg) for arg in config["args"]] == ["train.py", "--epochs", "10"]
    assert attrs(only(task, "env")) == {"WANDB_MODE": "offline"}
    device = labelled(only(task, "resources"), "device")[A100]
    assert text(device["constraint"][0]["value"]) == "GPU-main-0000"


def test_multi_gpu_pins_all_eight() -> None:
    spec = load_spec(JOBSPECS / "train-multi.yaml")
    assert isinstance(spec, JobSpec)
    _, job = render(spec)
    resources = only(labelled(labelled(job, "group")["trainer"], "task")["trainer"], "resources")
    device = labelled(resources, "device")[A100]
    assert device["count"] == 8
    assert text(device["constraint"][0]["value"]).split(",") == [f"GPU-trainer-{i:04d}" for i in range(8)]
    assert (resources["cpu"], resources["memory"]) == (32000, 262144)


def test_mig_inference_is_a_service_on_one_slice() -> None:
    spec = load_spec(JOBSPECS / "inference-mig.yaml")
    assert isinstance(spec, JobSpec)
    _, job = render(spec)
    assert text(job["type"]) == "service"
    resources = only(labelled(labelled(job, "group")["main"], "task")["main"], "resources")
    device = labelled(resources, "device")[A100_MIG]
    assert device["count"] == 1
    assert text(device["constraint"][0]["value"]) == "MIG-main-0000"


def test_share_reaches_the_task_as_visible_devices_and_group_meta() -> None:
    spec = load_spec(JOBSPECS / "notebook-share.yaml")
    assert isinstance(spec, JobSpec)
    _, job = render(spec)
    group = labelled(job, "group")["main"]
    assert attrs(only(group, "meta")) == {"nomad_gpu_share_gpu": "GPU-shared-0001", "nomad_gpu_share_milli": "250"}
    task = labelled(group, "task")["main"]
    assert attrs(only(task, "env"))["NVIDIA_VISIBLE_DEVICES"] == "GPU-shared-0001"
    assert text(only(task, "config")["runtime"]) == "nvidia"
    assert "device" not in only(task, "resources")


SHARED_L40S = "nomad-gpu/shared-gpu/NVIDIA L40S"


def test_a_share_on_the_plugins_share_instances_is_a_pinned_device() -> None:
    """The share contract: k share instances of one GPU, pinned by ${device.ids} with count = k, so
    Nomad reserves them through the plugin; the job names no GPU in its own environment."""
    spec = load_spec("name: nb\ntask: {image: i, driver: docker}\nshare: {milli: 500}\n")
    assert isinstance(spec, JobSpec)
    slots = ("GPU-s-share-0", "GPU-s-share-1")
    placement = RenderPlacement(NODE, (GroupPlacement("main", SHARED_L40S, slots, share_gpu="GPU-s",
                                                      share_milli=500),))
    _, job = parse_job(render_job(spec, job_id="nb-1", placement=placement))
    group = labelled(job, "group")["main"]
    task = labelled(group, "task")["main"]
    device = labelled(only(task, "resources"), "device")[SHARED_L40S]
    assert device["count"] == 2
    (pin,) = device["constraint"]
    assert (target(pin["attribute"]), text(pin["operator"]), text(pin["value"])) == (
        "${device.ids}", "set_contains_any", "GPU-s-share-0,GPU-s-share-1")
    assert "env" not in task
    assert "runtime" not in only(task, "config")
    assert attrs(only(group, "meta")) == {"nomad_gpu_share_gpu": "GPU-s", "nomad_gpu_share_milli": "500"}


@pytest.mark.parametrize(("name", "ids", "message"), [
    ("nvidia/gpu/NVIDIA L40S", ("GPU-s-share-0",), "a share pins share instances"),
    (SHARED_L40S, (), "a share pins share instances"),
    (SHARED_L40S, ("GPU-s-share-0", "GPU-s-share-0"), "twice"),
    (SHARED_L40S, ("GPU-s-share-0,GPU-t-share-0",), "invalid device id"),
])
def test_a_bad_share_pin_is_refused(name: str, ids: tuple[str, ...], message: str) -> None:
    spec = load_spec("name: nb\ntask: {image: i}\nshare: {milli: 500}\n")
    assert isinstance(spec, JobSpec)
    placement = RenderPlacement(NODE, (GroupPlacement("main", name, ids, share_gpu="GPU-s", share_milli=500),))
    with pytest.raises(RenderError, match=message):
        render_job(spec, job_id="nb-1", placement=placement)


def test_share_meta_reports_the_reserved_milli() -> None:
    spec = load_spec("name: nb\ntask: {image: i}\nshare: {milli: 200}\n")
    assert isinstance(spec, JobSpec)
    placement = RenderPlacement(NODE, (GroupPlacement("main", None, (), share_gpu="GPU-s", share_milli=250),))
    _, job = parse_job(render_job(spec, job_id="nb-1", placement=placement))
    assert attrs(only(labelled(job, "group")["main"], "meta"))["nomad_gpu_share_milli"] == "250"


def test_gang_renders_every_group_on_one_node() -> None:
    spec = load_spec(JOBSPECS / "gang.yaml")
    assert isinstance(spec, JobSpec) and spec.is_gang
    _, job = render(spec)
    groups = labelled(job, "group")
    assert list(groups) == ["ps", "worker"]
    assert "device" not in only(labelled(groups["ps"], "task")["ps"], "resources")
    worker = only(labelled(groups["worker"], "task")["worker"], "resources")
    device = labelled(worker, "device")[A100]
    assert device["count"] == 2  # per allocation; the group has count 2, so 4 ids are pinned
    assert text(device["constraint"][0]["value"]).count(",") == 3
    args = [text(arg) for arg in only(labelled(groups["worker"], "task")["worker"], "config")["args"]]
    assert "${NOMAD_JOB_ID}" in args  # reaches Nomad literally; Nomad interpolates it at run time


def test_sweep_example_is_eight_trials_four_at_a_time() -> None:
    spec = load_spec(JOBSPECS / "sweep.yaml")
    assert isinstance(spec, SweepSpec)
    assert spec.sweep.max_parallel == 4
    trials = expand_sweep(spec)
    assert len(trials) == 8
    _, job = render(trials[5])
    meta = attrs(only(job, "meta"))
    assert meta["nomad_gpu_sweep"] == "lr-sweep"
    assert meta["nomad_gpu_trial"] == "5"
    assert (meta["nomad_gpu_trial_lr"], meta["nomad_gpu_trial_batch"]) == ("0.001", "64")
    env = attrs(only(labelled(labelled(job, "group")["main"], "task")["main"], "env"))
    assert (env["TRIAL_LR"], env["TRIAL_BATCH"]) == ("0.001", "64")


def test_job_meta_is_user_meta_plus_ours_and_the_callers() -> None:
    spec = load_spec(
        "name: demo\nteam: vision\nmeta: {owner: alice}\ntask: {image: i}\ndev: {duration_s: 1.5, fail: true}\n"
    )
    assert isinstance(spec, JobSpec)
    _, job = render(spec, nomad_gpu_entry="q-42", nomad_gpu_team="override")
    assert attrs(only(job, "meta")) == {
        "owner": "alice",
        "nomad_gpu_name": "demo",
        "nomad_gpu_team": "override",  # the caller's keys are applied last
        "nomad_gpu_dev_duration_s": "1.5",
        "nomad_gpu_dev_exit": "fail",
        "nomad_gpu_entry": "q-42",
    }


def test_job_attributes() -> None:
    spec = load_spec(
        "name: demo\npriority: 77\ndatacenters: [dc1, dc2]\nnamespace: ml\nnode_pool: gpu\n"
        "task: {image: i}\nresources: {cpu: 1, memory: 2, memory_max: 4}\n"
    )
    assert isinstance(spec, JobSpec)
    _, job = render(spec)
    assert job["priority"] == 77
    assert [text(dc) for dc in job["datacenters"]] == ["dc1", "dc2"]
    assert (text(job["namespace"]), text(job["node_pool"])) == ("ml", "gpu")
    resources = only(labelled(labelled(job, "group")["main"], "task")["main"], "resources")
    assert (resources["cpu"], resources["memory"], resources["memory_max"]) == (1, 2, 4)


def test_no_node_pool_and_no_chosen_pool_means_no_attribute() -> None:
    _, job = render(_spec("name: demo\ntask: {image: i}\n"))
    assert "node_pool" not in job


def test_without_a_pool_in_the_spec_the_chosen_nodes_pool_is_rendered() -> None:
    # Nomad fills in `default` and scans only that pool (job_endpoint_hook_node_pool_ce.go, scheduler/util.go,
    # v2.0.5): a job pinned to a node of the `gpu` pool without `node_pool = "gpu"` would stay blocked forever
    spec = _spec("name: demo\ntask: {image: i}\n")
    placed = dataclasses.replace(placement_for(spec), node_pool="gpu")
    _, job = parse_job(render_job(spec, job_id="job-1", placement=placed))
    assert text(job["node_pool"]) == "gpu"
    _, named = parse_job(render_job(_spec("name: demo\nnode_pool: a100\ntask: {image: i}\n"), job_id="job-1",
                                    placement=placed))
    assert text(named["node_pool"]) == "a100", "the spec's own pool wins (the core placed within it)"


def test_datacenters_default_to_any_as_current_nomad() -> None:
    _, job = render(_spec("name: demo\ntask: {image: i}\n"))
    assert [text(dc) for dc in job["datacenters"]] == ["*"]


def _spec(text_: str) -> JobSpec:
    spec = load_spec(text_)
    assert isinstance(spec, JobSpec)
    return spec


GPU2 = _spec("name: demo\ngroups:\n  - {name: g, count: 2, task: {image: i}, gpu: {count: 2}}\n")
SHARE = _spec("name: demo\ntask: {image: i}\nshare: {milli: 500}\n")
CPU = _spec("name: demo\ntask: {image: i}\n")
IDS4 = ("GPU-a", "GPU-b", "GPU-c", "GPU-d")


@pytest.mark.parametrize(
    ("spec", "placement", "message"),
    [
        pytest.param(GPU2, RenderPlacement(NODE, ()), "no group 'g'", id="missing-group"),
        pytest.param(
            GPU2,
            RenderPlacement(NODE, (GroupPlacement("g", A100, IDS4), GroupPlacement("x", None, ()))),
            "groups the spec does not",
            id="extra-group",
        ),
        pytest.param(
            GPU2, RenderPlacement(NODE, (GroupPlacement("g", A100, IDS4[:3]),)), "needs 4 device ids", id="too-few-ids"
        ),
        pytest.param(
            GPU2,
            RenderPlacement(NODE, (GroupPlacement("g", A100, ("GPU-a", "GPU-a", "GPU-b", "GPU-c")),)),
            "pins a device id twice",
            id="duplicate-id",
        ),
        pytest.param(
            GPU2,
            RenderPlacement(NODE, (GroupPlacement("g", A100, ("GPU-a,GPU-z", "GPU-b", "GPU-c", "GPU-d")),)),
            "invalid device id",
            id="comma-widens-the-pin",
        ),
        pytest.param(GPU2, RenderPlacement(NODE, (GroupPlacement("g", None, IDS4),)), "names no device", id="no-name"),
        pytest.param(GPU2, RenderPlacement("", (GroupPlacement("g", A100, IDS4),)), "invalid node id", id="empty-node"),
        pytest.param(
            SHARE, RenderPlacement(NODE, (GroupPlacement("main", None, ()),)), "no valid shared GPU", id="share-no-gpu"
        ),
        pytest.param(
            SHARE,
            RenderPlacement(NODE, (GroupPlacement("main", None, (), share_gpu="GPU-s", share_milli=400),)),
            "reserves 400",
            id="share-too-small",
        ),
        pytest.param(
            CPU, RenderPlacement(NODE, (GroupPlacement("main", A100, ("GPU-a",)),)), "pins some", id="cpu-with-gpu"
        ),
        pytest.param(
            CPU,
            RenderPlacement(NODE, (GroupPlacement("main", None, (), share_gpu="GPU-s"),)),
            "has one",
            id="cpu-with-share",
        ),
    ],
)
def test_a_placement_that_does_not_fit_the_spec_is_refused(
    spec: JobSpec, placement: RenderPlacement, message: str
) -> None:
    with pytest.raises(RenderError, match=message):
        render_job(spec, job_id="j", placement=placement)


@pytest.mark.parametrize("job_id", ["", "a b", "a\nb", "x" * 129])
def test_a_bad_job_id_is_refused(job_id: str) -> None:
    with pytest.raises(RenderError, match="job id"):
        render_job(CPU, job_id=job_id, placement=placement_for(CPU))


def test_a_bad_extra_meta_key_is_refused() -> None:
    with pytest.raises(RenderError, match="identifier"):
        render_job(CPU, job_id="j", placement=placement_for(CPU), extra_meta={"a b": "x"})


def test_a_sweep_must_be_expanded_first() -> None:
    sweep = load_spec("kind: sweep\nname: s\ntask: {image: i}\nsweep: {parameters: {x: [1]}}\n")
    with pytest.raises(RenderError, match="expand_sweep"):
        render_job(sweep, job_id="j", placement=placement_for(sweep))  # type: ignore[arg-type]


def test_templates_are_chosen_by_name() -> None:
    assert JobRenderer().template_names() == ["batch", "service"]
    unknown = _spec("name: demo\ntemplate: nope\ntask: {image: i}\n")
    with pytest.raises(RenderError, match=r"unknown template 'nope.hcl.j2' \(available: batch, service\)"):
        render_job(unknown, job_id="j", placement=placement_for(unknown))
    service_job = _spec("name: demo\ntemplate: nomad-gpu\ntask: {image: i}\n")
    with pytest.raises(RenderError, match="not a job template"):
        render_job(service_job, job_id="j", placement=placement_for(service_job))


def test_the_templates_directory_is_a_parameter(tmp_path: Path) -> None:
    (tmp_path / "tiny.hcl.j2").write_text('job {{ job.id }} {\n  type = "batch"\n}\n')
    spec = _spec("name: demo\ntemplate: tiny\ntask: {image: i}\n")
    source = render_job(spec, job_id="x", placement=placement_for(spec), templates_dir=tmp_path)
    assert parse_job(source) == ("x", {"type": '"batch"', "__is_block__": True})
    assert JobRenderer(tmp_path).template_names() == ["tiny"]


def test_the_service_job_renders() -> None:
    settings = ServiceJobSettings(
        image="ghcr.io/example/nomad-gpu:0.1",
        env={"NOMAD_ADDR": "https://nomad.service.consul:4646", "NOMAD_GPU_ADDR": "http://0.0.0.0:4690"},
        node_pool="control",
    )
    job_id, job = parse_job(render_service_job(settings))
    assert job_id == "nomad-gpu"
    assert_allowed_shape("job", job)
    assert text(job["type"]) == "service"
    assert text(job["node_pool"]) == "control"
    group = labelled(job, "group")["nomad-gpu"]
    assert group["count"] == 1
    task = labelled(group, "task")["nomad-gpu"]
    assert attrs(only(task, "env")) == {"NVIDIA_VISIBLE_DEVICES": "void", **settings.env}
    config = only(task, "config")
    assert text(config["image"]) == "ghcr.io/example/nomad-gpu:0.1"
    # the queue lives on a host volume: a restarted task keeps its entries and its job ID prefix
    assert [text(arg) for arg in config["args"]] == ["serve", "--db", "/var/lib/nomad-gpu/queue.db"]
    volume = labelled(group, "volume")["queue"]
    assert (text(volume["type"]), text(volume["source"]), volume["read_only"]) == ("host", "nomad-gpu", False)
    mount = only(task, "volume_mount")
    assert (text(mount["volume"]), text(mount["destination"])) == ("queue", "/var/lib/nomad-gpu")


def test_every_template_resists_hostile_values() -> None:
    """Render EVERY selectable template with hostile text in every field and read it back.

    A new template is covered automatically; one that forgets a value, quotes one
    itself or adds a stanza the dev cluster does not map fails here.
    """
    evil = '"} evil { x = "${file("/etc/passwd")}%{ if true }\\\n\t$${'
    tested = set()
    for name in JobRenderer().template_names():
        spec = JobSpec.model_validate(
            {
                "name": "evil",
                "template": name,
                "datacenters": [evil],
                "meta": {"m": evil},
                "groups": [
                    {
                        "name": "g",
                        "task": {"image": evil, "command": evil, "args": [evil, evil], "env": {"E": evil}},
                        "gpu": {"count": 1},
                    }
                ],
            }
        )
        placement = RenderPlacement(evil.replace(" ", "").replace("\n", "").replace("\t", ""),
                                    (GroupPlacement("g", evil, ("GPU-" + evil.replace(" ", "")[:5],)),))  # fmt: skip
        job_id, job = parse_job(render_job(spec, job_id="evil", placement=placement, extra_meta={"nomad_gpu_x": evil}))
        assert job_id == "evil"
        assert_allowed_shape("job", job)
        assert [text(dc) for dc in job["datacenters"]] == [evil]
        assert attrs(only(job, "meta"))["m"] == evil
        assert attrs(only(job, "meta"))["nomad_gpu_x"] == evil
        assert text(job["constraint"][0]["value"]) == placement.node_id
        task = labelled(labelled(job, "group")["g"], "task")["g"]
        config = only(task, "config")
        assert [text(config["image"]), text(config["command"])] == [evil, evil]
        assert [text(arg) for arg in config["args"]] == [evil, evil]
        assert attrs(only(task, "env")) == {"E": evil}
        device = labelled(only(task, "resources"), "device")[evil]
        assert text(device["constraint"][0]["value"]) == placement.groups[0].device_ids[0]
        tested.add(name)
    settings = ServiceJobSettings(image=evil, env={"NOMAD_ADDR": evil}, datacenters=(evil,), command=evil, args=(evil,))
    _, job = parse_job(render_service_job(settings))
    assert_allowed_shape("job", job)
    task = labelled(labelled(job, "group")["nomad-gpu"], "task")["nomad-gpu"]
    assert attrs(only(task, "env")) == {"NOMAD_ADDR": evil, "NVIDIA_VISIBLE_DEVICES": "void"}
    assert [text(arg) for arg in only(task, "config")["args"]][0] == evil  # then --db <the host volume>
    tested.add("nomad-gpu")
    on_disk = {path.name.removesuffix(".hcl.j2") for path in TEMPLATES.glob("*.hcl.j2")}
    assert tested == {name for name in on_disk if not name.startswith("_")}


def test_a_group_without_a_gpu_sees_none() -> None:
    """Images that default NVIDIA_VISIBLE_DEVICES to `all` must not get every GPU of an nvidia-runtime node."""
    spec = _spec(
        "name: gang\ngroups:\n"
        "  - {name: trainer, task: {image: i}, gpu: {count: 1}}\n"
        "  - {name: mig, task: {image: i}, mig: {profile: 3g.40gb}}\n"
        "  - {name: notebook, task: {image: i}, share: {milli: 250}}\n"
        "  - {name: loader, task: {image: i, env: {A: b}}}\n"
        "  - {name: probe, task: {driver: exec, command: /bin/true}}\n"
    )
    _, job = parse_job(render_job(spec, job_id="gang", placement=placement_for(spec)))
    env = {}
    for name, group in labelled(job, "group").items():
        task = labelled(group, "task")[name]
        env[name] = attrs(only(task, "env")) if "env" in task else {}
    assert env["loader"] == {"A": "b", "NVIDIA_VISIBLE_DEVICES": "void"}
    assert env["probe"] == {"NVIDIA_VISIBLE_DEVICES": "void"}
    assert env["notebook"] == {"NVIDIA_VISIBLE_DEVICES": "GPU-shared-0001"}
    assert "NVIDIA_VISIBLE_DEVICES" not in env["trainer"] and "NVIDIA_VISIBLE_DEVICES" not in env["mig"]


def test_a_renderer_compiles_each_template_once(tmp_path: Path) -> None:
    template = tmp_path / "tiny.hcl.j2"
    template.write_text('job {{ job.id }} {\n  type = "batch"\n}\n')
    renderer = JobRenderer(tmp_path)
    spec = _spec("name: demo\ntemplate: tiny\ntask: {image: i}\n")
    first = renderer.render_job(spec, job_id="x", placement=placement_for(spec))
    template.write_text('job {{ job.id }} {\n  type = "service"\n}\n')
    later = template.stat().st_mtime + 60
    os.utime(template, (later, later))  # no stat of the file on the next render, however new it looks
    assert renderer.render_job(spec, job_id="x", placement=placement_for(spec)) == first


def test_dev_exit_on_signal_is_rendered_as_the_dev_clusters_meta() -> None:
    """`dev: {exit_on_signal_after_s: N}`: the dev cluster's task handles its kill signal and exits 0
    N seconds later (devcluster/kills.py), as a task that checkpoints."""
    spec = load_spec("name: demo\ntask: {image: i}\ndev: {duration_s: 600, exit_on_signal_after_s: 2.5}\n")
    assert isinstance(spec, JobSpec)
    _, job = render(spec)
    assert attrs(only(job, "meta"))["nomad_gpu_dev_exit_on_signal_after_s"] == "2.5"
