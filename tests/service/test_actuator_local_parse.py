"""A job of a bundled template is registered with its built Job JSON, without `POST /v1/jobs/parse`
(render/jobjson.py, proven in tests/render/test_job_json.py); a user's own templates directory, or the
operator's `nomad: {local_parse: false}`, keeps Nomad's parse. The register is otherwise unchanged: the
HCL as the submission, create-only, the entry's meta."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from nomad_gpu.devcluster.hcl import parse_job_hcl
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.render import GroupPlacement, JobSpec, RenderPlacement, load_spec
from nomad_gpu.service.config.settings import scheduling_from_mapping
from nomad_gpu.service.life.actuator import META_ATTEMPT, META_INSTANCE, META_SERVICE, Actuator
from nomad_gpu.store import QueueEntry

REPO = Path(__file__).resolve().parents[2]
ENTRY = QueueEntry(id="q000001", name="train", team="ml", priority=50, spec={}, submitted_at=0.0, attempts=1,
                   job_prefix="abc123")
NODE = "5c7d9f0e-1b2a-4c3d-8e9f-0a1b2c3d4e5f"


class CountingNomad:
    """Our NomadClient's surface for a register: counts the parse requests, keeps what was registered.
    Its parse is the dev cluster's model of Nomad's (jobspec2), as `/v1/jobs/parse` answers."""

    def __init__(self, version: str = "2.0.5") -> None:
        self.version = version
        self.parses = 0
        self.registered: list[tuple[dict[str, Any], str, bool, str | None]] = []

    def parse(self, hcl: str) -> dict[str, Any]:
        self.parses += 1
        return parse_job_hcl(hcl, max_run_duration=self.version >= "2.0.3")

    def register(self, job: dict[str, Any], hcl: str, *, create_only: bool = False,
                 namespace: str | None = None) -> None:
        self.registered.append((job, hcl, create_only, namespace))

    def server_members(self) -> dict[str, Any]:
        return {"Members": [{"Tags": {"build": self.version}}]}

    def nodes(self, resources: bool = True) -> list[dict[str, Any]]:
        return [{"Version": self.version}]


def _spec(text: str | Path) -> JobSpec:
    spec = load_spec(text)
    assert isinstance(spec, JobSpec)
    return spec


def _placement(spec: JobSpec) -> RenderPlacement:
    return RenderPlacement(NODE, tuple(
        GroupPlacement(g.name, "nvidia/gpu/NVIDIA A100-SXM4-80GB",
                       tuple(f"GPU-{g.name}-{i}" for i in range(g.device_count * g.count)))
        if g.gpu is not None else GroupPlacement(g.name, None, ()) for g in spec.groups))


SPECS: dict[str, str | Path] = {
    "train": REPO / "jobspecs" / "train.yaml",
    "gang": REPO / "jobspecs" / "gang.yaml",
    "max-runtime": "name: mr\ntask: {image: i}\nmax_runtime: 90\ngpu: {count: 1}\n",
    "service": "name: web\ntemplate: service\ntask: {image: i}\ngpu: {count: 1}\n",
}


@pytest.mark.parametrize("version", ["2.0.5", "2.0.2"])
@pytest.mark.parametrize("name", list(SPECS))
def test_a_bundled_template_registers_without_a_parse_request(name: str, version: str) -> None:
    spec = _spec(SPECS[name])
    local, parsed = CountingNomad(version), CountingNomad(version)
    hcl = Actuator(local).submit(ENTRY, spec, _placement(spec))  # type: ignore[arg-type]
    assert local.parses == 0
    Actuator(parsed, local_parse=False).submit(ENTRY, spec, _placement(spec))  # type: ignore[arg-type]
    assert parsed.parses == 1
    (job, submitted, create_only, namespace), = local.registered
    (nomads, _, _, _), = parsed.registered
    assert json.dumps(job, sort_keys=True) == json.dumps(nomads, sort_keys=True)
    assert (submitted, create_only, namespace) == (hcl, True, ENTRY.namespace)
    assert job["Meta"]["nomad_gpu_entry"] == ENTRY.id and job["Meta"][META_ATTEMPT] == "1"
    assert job["Meta"][META_INSTANCE] == "abc123" and job["Meta"][META_SERVICE] == "nomad-gpu"


def test_a_users_own_templates_directory_always_goes_through_nomads_parse(tmp_path: Path) -> None:
    shutil.copytree(REPO / "templates", tmp_path / "mine")
    spec = _spec(SPECS["train"])
    nomad = CountingNomad()
    hcl = Actuator(nomad, tmp_path / "mine").submit(ENTRY, spec, _placement(spec))  # type: ignore[arg-type]
    assert nomad.parses == 1
    assert nomad.registered[0][0] == parse_job_hcl(hcl) and nomad.registered[0][1] == hcl


def test_the_operator_switch_is_read_from_the_config() -> None:
    assert scheduling_from_mapping({}).local_parse is True
    assert scheduling_from_mapping({"nomad": {"local_parse": False}}).local_parse is False
    assert scheduling_from_mapping({"nomad": {"local_parse": True}}).local_parse is True
    for bad in ({"local_parse": "no"}, {"parse": False}, ["local_parse"]):
        with pytest.raises(InvalidRequest, match="nomad: must be a mapping with only local_parse"):
            scheduling_from_mapping({"nomad": bad})
