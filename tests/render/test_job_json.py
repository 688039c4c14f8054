"""The Job JSON built from a bundled template's context equals Nomad's parse of the HCL it renders.

The proof that lets the service skip `POST /v1/jobs/parse` (render/jobjson.py): every bundled job
template x every example spec and the spec variants the render tests use (MIG, shares, pinned share
devices, ports and services, classes, sweeps, gangs, the chosen node pool, hostile strings), compared
after JSON normalisation with the dev cluster's parse (its model of jobspec2) in process, with and
without the 2.0.3 group field, and once over HTTP through python-nomad as the actuator asks it.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nomad
import pytest

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.hcl import parse_job_hcl
from nomad_gpu.render import GroupPlacement, JobRenderer, JobSpec, RenderPlacement, expand_sweep, load_spec
from nomad_gpu.render.jobjson import PROVEN_TEMPLATES, job_json

from .helpers import JOBSPECS, NODE, REPO, TEMPLATES, placement_for

HOSTILE = 'a "quoted" \\ value\n\ttab ${NOMAD_ALLOC_ID} $${x} %{ if } %{ unclosed ${open é \U0001f600'


def _q(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


INLINE = {
    "cpu-only": "name: cpu\ntask: {image: i}\n",
    "hostile": ("name: h\nteam: ml\ntask:\n  image: " + _q(HOSTILE) + "\n  command: " + _q(HOSTILE)
                + "\n  args: [" + _q(HOSTILE) + ", '--lr=3e-4', '']\n  env: {A: " + _q(HOSTILE)
                + ", B: ''}\nmeta: {note: " + _q(HOSTILE) + "}\ngpu: {count: 1}\n"),
    "exec-driver": "name: ex\ntask: {command: /bin/true, driver: exec}\ngpu: {count: 2}\n",
    "memory-max": "name: mm\ntask: {image: i}\nresources: {cpu: 500, memory: 1024, memory_max: 4096}\n",
    "max-runtime": "name: mr\ntask: {image: i}\nmax_runtime: 90\ngpu: {count: 1}\n",
    "max-runtime-fraction": "name: mf\ntask: {image: i}\nmax_runtime: 1.5\n",
    "dev-meta": "name: d\ntask: {image: i}\ndev: {duration_s: 2.5, fail: true, gpu_util: 40}\n",
    "share": "name: nb\ntask: {image: i, driver: docker}\nshare: {milli: 500}\n",
    "node-pool": "name: np\nnode_pool: a100\ndatacenters: [dc1, dc2]\npriority: 80\ntask: {image: i}\n",
    "ports": ("name: web\ntask: {image: i, driver: docker}\nports: {http: {to: 8080}, admin: {static: 9000},"
              " raw: {}}\nservice: {name: web, port: http, provider: nomad, tags: [a, b],"
              " check: {type: http, path: /health, interval: 1.5, timeout: 2}}\n"),
    "checkpoint": ("name: ck\nclass: training\npreemptible: true\ncheckpoint: {signal: SIGUSR1, grace: 2m}\n"
                   "task: {image: i}\ngpu: {count: 1}\n"),
    "checkpoint-fraction": "name: cf\ncheckpoint: {grace: 1.5}\ntask: {image: i}\n",
    "tcp-check": ("name: t\ntask: {image: i}\nports: {p: {}}\nservice: {name: t, port: p,"
                  " check: {type: tcp, interval: 10, timeout: 2.5}}\n"),
}


def _specs() -> Iterator[tuple[str, JobSpec]]:
    for path in sorted(JOBSPECS.glob("*.yaml")):
        loaded = load_spec(path)
        for i, spec in enumerate(expand_sweep(loaded) if not isinstance(loaded, JobSpec) else [loaded]):
            yield f"{path.stem}#{i}", spec
    for name, text in INLINE.items():
        inline = load_spec(text)
        assert isinstance(inline, JobSpec)
        yield name, inline


def _cases() -> Iterator[tuple[str, JobSpec, RenderPlacement]]:
    for name, spec in _specs():
        for template in PROVEN_TEMPLATES:
            placed = spec.model_copy(update={"template": template})
            yield f"{name}:{template}", placed, placement_for(placed)
            if name == "share":  # a share on the plugin's share instances: a pinned device
                slots = ("GPU-s-share-0", "GPU-s-share-1")
                yield f"{name}-pinned:{template}", placed, RenderPlacement(NODE, (GroupPlacement(
                    "main", "nomad-gpu/shared-gpu/NVIDIA L40S", slots, share_gpu="GPU-s", share_milli=500),))
            if name == "cpu-only":  # no pool in the spec: the chosen node's pool is written
                yield f"{name}-chosen-pool:{template}", placed, dataclasses.replace(placement_for(placed),
                                                                                    node_pool="gpu")


CASES = list(_cases())
META = {"nomad_gpu_entry": "e1", "nomad_gpu_attempt": "1", "nomad_gpu_instance": "q7",
        "nomad_gpu_service": "nomad-gpu"}


def _normal(job: Any) -> str:
    return json.dumps(job, sort_keys=True, ensure_ascii=False)


def test_the_cases_cover_every_bundled_job_template_and_example() -> None:
    renderer = JobRenderer()
    assert set(renderer.template_names()) == set(PROVEN_TEMPLATES)
    names = {case.split(":")[0].split("#")[0] for case, _, _ in CASES}
    assert {path.stem for path in JOBSPECS.glob("*.yaml")} <= names
    assert len(CASES) > 60


@pytest.mark.parametrize("field", [True, False], ids=["2.0.3-on", "before-2.0.3"])
@pytest.mark.parametrize(("case", "spec", "placement"), CASES, ids=[case for case, _, _ in CASES])
def test_the_built_json_is_nomads_parse_of_the_rendered_hcl(case: str, spec: JobSpec, placement: RenderPlacement,
                                                            field: bool) -> None:
    hcl, built = JobRenderer().render_job_json(spec, job_id=f"{spec.name}-e1", placement=placement,
                                               extra_meta=META, max_run_duration=field,
                                               max_run_duration_field=field)
    assert built is not None
    assert _normal(built) == _normal(parse_job_hcl(hcl, max_run_duration=field))


def test_templates_from_another_directory_are_never_built(tmp_path: Path) -> None:
    """A user's `--templates` directory goes through Nomad's parse, even with the bundled files in it."""
    shutil.copytree(TEMPLATES, tmp_path / "mine")
    spec = load_spec(JOBSPECS / "train.yaml")
    assert isinstance(spec, JobSpec)
    hcl, built = JobRenderer(tmp_path / "mine").render_job_json(spec, job_id="t-1", placement=placement_for(spec))
    assert built is None and hcl == JobRenderer().render_job(spec, job_id="t-1", placement=placement_for(spec))
    assert JobRenderer(REPO / "templates").bundled


def test_a_template_or_value_outside_the_proof_is_not_built() -> None:
    spec = load_spec(JOBSPECS / "train.yaml")
    assert isinstance(spec, JobSpec)
    _, built = JobRenderer().render_job_json(spec, job_id="t-1", placement=placement_for(spec))
    assert built is not None
    context: dict[str, Any] = {"job": {}, "groups": []}
    assert job_json("custom", context, max_run_duration_field=True) is None
    odd = {"job": {"namespace": "default", "id": "x", "priority": 50, "datacenters": ["*"], "node_pool": None,
                   "node_id": NODE, "meta": {}, "max_run_duration": "1e-05s"}, "groups": []}
    assert job_json("batch", odd, max_run_duration_field=True) is None


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    started = DevCluster(REPO / "clusters" / "seed-a800.yaml", speed=1000.0)
    started.start()
    yield started
    started.stop()


@pytest.mark.server
def test_the_built_json_is_the_dev_clusters_parse_over_http(cluster: DevCluster) -> None:
    client = nomad.Nomad(address=cluster.url, timeout=10)
    renderer = JobRenderer()
    for case, spec, placement in CASES:
        hcl, built = renderer.render_job_json(spec, job_id=f"{spec.name}-e1", placement=placement, extra_meta=META,
                                              max_run_duration=True, max_run_duration_field=True)
        assert _normal(built) == _normal(client.jobs.parse(hcl, canonicalize=False)), case
