"""Who may do what (DESIGN 12): team tokens, the admin token, allowed drivers, where and how serve listens."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from starlette.testclient import TestClient

from nomad_gpu.cli.main import main
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.admission.access import ADMIN, OTHER_TEAM, Caller, status_view
from nomad_gpu.service.config.settings import AccessSettings, load_config
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.listen import ApiServer, plan_listen
from nomad_gpu.service.loops.scheduler import SchedulerService

VISION = "vision-0123456789abcdef"
NLP = "nlp-0123456789abcdef0000"
ROOT = "admin-0123456789abcdef00"
ACCESS = AccessSettings(tokens={VISION: "vision", NLP: "nlp"})




@pytest.fixture
def client(service: SchedulerService) -> TestClient:
    return TestClient(create_app(service, token=ROOT, access=ACCESS))


def as_(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def job(name: str, team: str | None = None, secret: str = "s") -> str:
    return (f"name: {name}\n" + (f"team: {team}\n" if team else "")
            + f"task: {{image: busybox, env: {{API_KEY: {secret}}}}}\n")


def submit(client: TestClient, token: str, text: str, **headers: str) -> dict[str, Any]:
    r = client.post("/v1/jobs", content=text, headers={**as_(token), **headers})
    assert r.status_code == 201, r.text
    return dict(r.json()["entries"][0])


def test_a_team_token_binds_the_entry_to_its_team(client: TestClient) -> None:
    assert submit(client, VISION, job("a"))["team"] == "vision"  # no team in the spec
    assert submit(client, VISION, job("b", "vision"))["team"] == "vision"
    r = client.post("/v1/jobs", content=job("c", "unconfigured"), headers=as_(VISION))
    assert r.status_code == 403
    assert "submits for team 'vision'" in r.json()["error"]
    assert submit(client, ROOT, job("d", "nlp"))["team"] == "nlp"  # the admin names any team


def test_a_team_sees_and_cancels_only_its_own_entries(client: TestClient, service: SchedulerService) -> None:
    mine = submit(client, VISION, job("mine", secret="vision-secret"))
    theirs = submit(client, NLP, job("theirs", secret="nlp-secret"))
    listed = client.get("/v1/jobs", headers=as_(VISION))
    assert [e["id"] for e in listed.json()["entries"]] == [mine["id"]]
    assert "nlp-secret" not in listed.text
    assert client.get(f"/v1/jobs/{mine['id']}", headers=as_(VISION)).status_code == 200
    hidden = client.get(f"/v1/jobs/{theirs['id']}", headers=as_(VISION))
    unknown = client.get("/v1/jobs/q999999", headers=as_(VISION))
    assert hidden.status_code == unknown.status_code == 404
    assert hidden.json()["error"] == f"no queue entry {theirs['id']!r}"  # the same words as an unknown ID
    assert client.delete(f"/v1/jobs/{theirs['id']}", headers=as_(VISION)).status_code == 404
    assert service.store.get(theirs["id"]).state.value == "queued"
    assert client.delete(f"/v1/jobs/{mine['id']}", headers=as_(VISION)).json()["state"] == "cancelled"
    everything = client.get("/v1/jobs", headers=as_(ROOT)).json()["entries"]
    assert {e["id"] for e in everything} == {mine["id"], theirs["id"]}


def test_a_team_sees_only_its_own_sweeps(client: TestClient) -> None:
    sweep = "kind: sweep\nname: hp\ntask: {image: i}\nsweep: {parameters: {lr: [1, 2]}}\n"
    sweep_id = submit(client, NLP, sweep)["sweep"]
    assert client.get(f"/v1/sweeps/{sweep_id}", headers=as_(NLP)).json()["total"] == 2
    assert client.get(f"/v1/sweeps/{sweep_id}", headers=as_(VISION)).status_code == 404
    assert client.get(f"/v1/jobs?sweep={sweep_id}", headers=as_(VISION)).json()["entries"] == []


def test_an_idempotency_key_never_answers_with_another_teams_entry(client: TestClient) -> None:
    a = submit(client, NLP, job("a"), **{"Idempotency-Key": "k1"})
    b = submit(client, VISION, job("b"), **{"Idempotency-Key": "k1"})
    assert a["id"] != b["id"] and b["team"] == "vision"
    assert submit(client, VISION, job("b"), **{"Idempotency-Key": "k1"})["id"] == b["id"]
    submit(client, ROOT, job("c", "nlp"), **{"Idempotency-Key": "vision/k2"})  # the admin's keys are not scoped
    r = client.post("/v1/jobs", content=job("c"), headers={**as_(VISION), "Idempotency-Key": "k2"})
    assert r.status_code == 409 and "nlp" not in r.text


@pytest.mark.parametrize("headers", [
    pytest.param({}, id="none"),
    pytest.param({"Authorization": "Bearer nope-0123456789abcdef"}, id="wrong"),
    pytest.param({"Authorization": f"Basic {VISION}"}, id="not-bearer"),
])
def test_every_route_needs_a_known_token(client: TestClient, headers: dict[str, str]) -> None:
    for method, path in [("GET", "/v1/jobs"), ("POST", "/v1/jobs"), ("GET", "/v1/status"), ("GET", "/metrics"),
                         ("GET", "/v1/inventory"), ("DELETE", "/v1/jobs/q000001")]:
        r = client.request(method, path, headers=headers, content=job("x") if method == "POST" else None)
        assert r.status_code == 401, (method, path)
        assert r.json() == {"error": "missing or wrong token (set NOMAD_GPU_TOKEN)",
                            "errors": ["missing or wrong token (set NOMAD_GPU_TOKEN)"]}
    assert client.get("/v1/status", headers={"X-Nomad-Gpu-Token": NLP}).status_code == 200


def test_shared_views_fold_other_teams(client: TestClient, service: SchedulerService) -> None:
    service.metrics.set_queue(0, 0, {"vision": 1.0, "nlp": 2.0, "audio": 0.5, "_nomad": 1.0})
    text = client.get("/metrics", headers=as_(VISION)).text
    assert 'nomad_gpu_team_gpu_in_use{team="vision"} 1.0' in text
    assert f'nomad_gpu_team_gpu_in_use{{team="{OTHER_TEAM}"}} 2.5' in text
    assert 'team="nlp"' not in text and 'team="audio"' not in text
    assert 'team="_nomad"' in text  # plain Nomad jobs are nobody's team
    assert 'team="nlp"' in client.get("/metrics", headers=as_(ROOT)).text


def test_status_folds_other_teams_usage_and_holds() -> None:
    raw = {"ready": True, "team_usage_gpu": {"vision": 1.0, "nlp": 2.0, "audio": 1.0, "_nomad": 3.0},
           "holds": {"q1": ["n1"], "q2": ["n2"], "q3": ["n1", "n3"]}}
    teams = {"q1": "vision", "q2": "nlp", "q3": "audio"}
    view = status_view(raw, Caller("vision"), teams)
    assert view["team_usage_gpu"] == {"vision": 1.0, OTHER_TEAM: 3.0, "_nomad": 3.0}
    assert view["holds"] == {"q1": ["n1"], OTHER_TEAM: ["n1", "n2", "n3"]}
    assert status_view(raw, ADMIN, {}) == raw


@pytest.mark.parametrize(("driver", "allowed", "status"), [
    pytest.param("docker", None, 201, id="docker-default"),
    pytest.param("exec", None, 201, id="exec-default"),
    pytest.param("raw_exec", None, 403, id="raw-exec-default"),
    pytest.param("raw_exec", ["docker", "raw_exec"], 201, id="raw-exec-configured"),
    pytest.param("exec", ["docker"], 403, id="exec-removed"),
])
def test_allowed_drivers(service: SchedulerService, driver: str, allowed: list[str] | None, status: int) -> None:
    access = AccessSettings() if allowed is None else AccessSettings(allowed_drivers=frozenset(allowed))
    text = (f"name: d\ngroups:\n  - {{name: ok, task: {{image: i}}}}\n"
            f"  - {{name: g, task: {{driver: {driver}, image: i, command: /bin/true}}}}\n")
    r = TestClient(create_app(service, access=access)).post("/v1/jobs", content=text)
    assert r.status_code == status, r.text
    if status == 403:
        assert r.json()["error"].startswith(f"groups[g].task.driver: {driver!r} is not allowed here")


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def test_the_config_file_api_section(tmp_path: Path) -> None:
    scheduling, access = load_config(write(tmp_path, (
        f"policy: best-fit\napi:\n  tokens:\n    {VISION}: {{team: vision}}\n    {ROOT}: {{admin: true}}\n"
        "  allowed_drivers: [docker, raw_exec]\n  max_trials: 500\n  metrics_open: true\n")))
    assert scheduling.policy == "best-fit"
    assert dict(access.tokens) == {VISION: "vision", ROOT: None}
    assert access.allowed_drivers == {"docker", "raw_exec"} and access.max_trials == 500 and access.metrics_open
    assert VISION not in repr(access) and ROOT not in repr(access)
    _, default = load_config(write(tmp_path, "policy: best-fit\n"))
    assert default == AccessSettings() and not default.required
    assert default.allowed_drivers == {"docker", "exec"}


@pytest.mark.parametrize(("text", "message"), [
    pytest.param("api: {tokens: {short: {team: a}}}\n", "at least 16", id="short-token"),
    pytest.param(f"api:\n  tokens:\n    {VISION}: {{team: a}}\n    {VISION}: {{team: b}}\n",
                 "line 4, column 5: invalid YAML: a key is written twice", id="token-twice"),
    pytest.param(f"api: {{tokens: {{{VISION}: {{team: 'a b'}}}}}}\n", "team must be a team name", id="team-name"),
    pytest.param(f"api: {{tokens: {{{VISION}: {{team: a, admin: true}}}}}}\n", "{team: NAME} or {admin: true}",
                 id="both"),
    pytest.param(f"api: {{tokens: {{{VISION}: {{admin: yes-please}}}}}}\n", "admin must be true", id="admin"),
    pytest.param("api: {allowed_drivers: []}\n", "allowed_drivers", id="no-drivers"),
    pytest.param("api: {max_trials: 0}\n", "max_trials: must be an integer from 1 to 100000", id="max-trials"),
    pytest.param("api: {max_trials: 1000001}\n", "max_trials", id="max-trials-ceiling"),
    pytest.param("api: {metrics_open: 1}\n", "metrics_open", id="metrics-open"),
    pytest.param("api: {tokenz: {}}\n", "unknown key(s) tokenz", id="unknown"),
])
def test_bad_api_config_is_one_line_that_never_shows_a_token(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        load_config(write(tmp_path, text))
    assert message in str(info.value)
    assert VISION not in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(("listen", "token", "cert", "fragment"), [
    pytest.param("http://0.0.0.0:4690", False, False, "refusing to listen on 0.0.0.0 without a token", id="any"),
    pytest.param("http://10.1.2.3:4690", False, False, "without a token", id="lan"),
    pytest.param("http://gpu-queue.internal:4690", False, False, "without a token", id="hostname"),
    pytest.param("https://127.0.0.1:4690", False, False, "give --tls-cert and --tls-key", id="https-no-cert"),
    pytest.param("http://127.0.0.1:4690", False, True, "use an https:// address", id="cert-on-http"),
    pytest.param("ftp://127.0.0.1:4690", False, False, "must be http://HOST:PORT", id="scheme"),
    pytest.param("http://127.0.0.1:99999", False, False, "out of range", id="port"),
])
def test_unsafe_listen_addresses_are_refused(listen: str, token: bool, cert: bool, fragment: str) -> None:
    with pytest.raises(InvalidRequest, match=fragment.replace("+", r"\+")):
        plan_listen(listen, token_required=token, tls_cert="c.pem" if cert else None,
                    tls_key="k.pem" if cert else None)


@pytest.mark.parametrize(("listen", "token"), [
    pytest.param("http://127.0.0.1:4690", False, id="loopback"),
    pytest.param("http://localhost:0", False, id="localhost"),
    pytest.param("http://[::1]:4690", False, id="ipv6-loopback"),
    pytest.param("http://0.0.0.0:4690", True, id="any-with-token"),
])
def test_safe_listen_addresses(listen: str, token: bool) -> None:
    assert plan_listen(listen, token_required=token).scheme == "http"


def test_serve_refuses_a_public_address_without_a_token(tmp_path: Path) -> None:
    db = tmp_path / "queue.db"
    result = CliRunner().invoke(main, ["serve", "--db", str(db), "--listen", "http://0.0.0.0:0"],
                                env={"NOMAD_GPU_TOKEN": "", "NOMAD_ADDR": "http://127.0.0.1:1"})
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith("error: refusing to listen on 0.0.0.0 without a token")
    assert not db.exists()  # refused before anything was opened


def test_serve_refuses_https_without_tls_files(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["serve", "--db", str(tmp_path / "q.db"), "--listen", "https://127.0.0.1:0"],
                                env={"NOMAD_GPU_TOKEN": "", "NOMAD_ADDR": "http://127.0.0.1:1"})
    assert result.exit_code == 2 and "--tls-cert" in result.output


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
    return str(cert), str(key)


@pytest.mark.server
def test_an_https_address_is_served_with_tls(service: SchedulerService, certificate: tuple[str, str]) -> None:
    cert, key = certificate
    server = ApiServer(create_app(service), plan_listen("https://127.0.0.1:0", token_required=False,
                                                        tls_cert=cert, tls_key=key))
    address = server.serve()
    try:
        assert address.startswith("https://127.0.0.1:")
        assert requests.get(f"{address}/v1/status", verify=cert, timeout=10).status_code == 200
        with pytest.raises(requests.exceptions.ConnectionError):  # never plain http on that port
            requests.get(address.replace("https://", "http://") + "/v1/status", timeout=10)
    finally:
        server.stop()


@pytest.mark.server
def test_a_bad_key_is_refused_before_serving(service: SchedulerService, certificate: tuple[str, str],
                                             tmp_path: Path) -> None:
    cert, _ = certificate
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key\n")
    server = ApiServer(create_app(service), plan_listen("https://127.0.0.1:0", token_required=False, tls_cert=cert,
                                                        tls_key=str(bad)))
    with pytest.raises(InvalidRequest, match="TLS certificate or key"):
        server.bind()
