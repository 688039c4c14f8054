"""The service's own deployable Nomad job: a port, a Variable's files, TLS, a health check; no secret."""

from __future__ import annotations

import dataclasses

import pytest

from nomad_gpu.render import RenderError, ServiceJobSettings, render_service_job
from nomad_gpu.render.servicejob import check_variable_path

from .hclview import labelled, only, parse_job, target, text
from .test_render_jobs import assert_allowed_shape

DEPLOY = ServiceJobSettings(
    image="ghcr.io/example/nomad-gpu:0.1", env={"NOMAD_ADDR": "https://127.0.0.1:4646"}, node_pool="control",
    port=4690, variable="nomad/jobs/nomad-gpu", tls=True, nomad_ca=True, service_name="nomad-gpu")


def _task(job: dict) -> dict:
    return labelled(labelled(job, "group")["nomad-gpu"], "task")["nomad-gpu"]


def _args(task: dict) -> list[str]:
    return [target(arg) for arg in only(task, "config")["args"]]


def _templates(task: dict) -> dict[str, dict]:
    return {text(t["destination"]): t for t in task["template"]}


def test_the_deployable_job_listens_on_its_port_with_tls_and_the_variable_files() -> None:
    job_id, job = parse_job(render_service_job(DEPLOY))
    assert job_id == "nomad-gpu"
    assert_allowed_shape("job", job)
    group = labelled(job, "group")["nomad-gpu"]
    port = labelled(only(group, "network"), "port")["api"]
    assert port["static"] == 4690
    task = _task(job)
    args = _args(task)
    assert args[:3] == ["serve", "--db", "/var/lib/nomad-gpu/queue.db"]
    options = dict(zip(args[3::2], args[4::2], strict=True))
    assert options == {"--config": "${NOMAD_SECRETS_DIR}/config.yaml", "--listen": "https://${NOMAD_ADDR_api}",
                       "--tls-cert": "${NOMAD_SECRETS_DIR}/tls-cert.pem",
                       "--tls-key": "${NOMAD_SECRETS_DIR}/tls-key.pem"}
    env = {key: target(value) for key, value in only(task, "env").items() if not key.startswith("__")}
    assert env == {"NVIDIA_VISIBLE_DEVICES": "void", "NOMAD_ADDR": "https://127.0.0.1:4646",
                   "NOMAD_CACERT": "${NOMAD_SECRETS_DIR}/nomad-ca.pem"}
    templates = _templates(task)
    # every file the command line and the env name is a template's destination in the task's secrets/
    named = {value.removeprefix("${NOMAD_SECRETS_DIR}/") for value in [*options.values(), *env.values()]
             if value.startswith("${NOMAD_SECRETS_DIR}/")}
    assert {f"secrets/{name}" for name in named} | {"secrets/nomad-gpu.env"} == set(templates)
    assert text(templates["secrets/config.yaml"]["data"]) == (
        '{{ with nomadVar "nomad/jobs/nomad-gpu" }}{{ .config }}{{ end }}')
    assert text(templates["secrets/tls-key.pem"]["data"]) == (
        '{{ with nomadVar "nomad/jobs/nomad-gpu" }}{{ .tls_key }}{{ end }}')
    env_file = templates["secrets/nomad-gpu.env"]
    assert env_file["env"] is True and all(t["error_on_missing_key"] is True for t in templates.values())
    assert text(env_file["data"]).splitlines() == [
        '{{ with nomadVar "nomad/jobs/nomad-gpu" }}', "NOMAD_TOKEN={{ .nomad_token }}",
        "NOMAD_GPU_CHECK_TOKEN={{ .check_token }}", "{{ end }}"]
    service = only(task, "service")
    assert (text(service["name"]), text(service["port"]), text(service["provider"])) == ("nomad-gpu", "api", "nomad")
    check = only(service, "check")
    assert (text(check["type"]), text(check["path"]), text(check["protocol"])) == ("http", "/v1/status", "https")
    assert "tls_skip_verify" not in check  # Nomad refuses it on its own checks: they verify with the node's CAs
    # the check's token comes from the template's env when the task runs, never from this file
    assert [target(v) for v in only(check, "header")["Authorization"]] == ["Bearer ${NOMAD_GPU_CHECK_TOKEN}"]
    config = only(task, "config")
    assert (text(config["image"]), text(config["network_mode"])) == ("ghcr.io/example/nomad-gpu:0.1", "host")


@pytest.mark.parametrize(("verify", "skip"), [(False, True), (True, False)])
def test_a_consul_check_may_skip_verifying_the_certificate(verify: bool, skip: bool) -> None:
    settings = dataclasses.replace(DEPLOY, service_provider="consul", check_tls_skip_verify=not verify)
    _, job = parse_job(render_service_job(settings))
    check = only(only(_task(job), "service"), "check")
    assert check.get("tls_skip_verify", False) is skip


def test_a_dynamic_port_plain_http_and_an_exec_command() -> None:
    settings = dataclasses.replace(DEPLOY, port=0, tls=False, nomad_ca=False, driver="exec",
                                   command="/usr/local/bin/nomad-gpu", image="")
    _, job = parse_job(render_service_job(settings))
    assert_allowed_shape("job", job)
    port = labelled(only(labelled(job, "group")["nomad-gpu"], "network"), "port")["api"]
    assert "static" not in port  # Nomad picks it; `nomad service info nomad-gpu` shows it
    task = _task(job)
    assert text(task["driver"]) == "exec"
    config = only(task, "config")
    assert set(config) - {"__is_block__"} == {"command", "args"}
    assert text(config["command"]) == "/usr/local/bin/nomad-gpu"
    assert "--tls-cert" not in _args(task) and "http://${NOMAD_ADDR_api}" in _args(task)
    assert set(_templates(task)) == {"secrets/config.yaml", "secrets/nomad-gpu.env"}
    check = only(only(task, "service"), "check")
    assert text(check["protocol"]) == "http" and "tls_skip_verify" not in check


def test_hostile_operator_values_stay_values() -> None:
    evil = '"} evil { x = "${file("/etc/passwd")}%{ if true }\\\n\t$${'
    settings = dataclasses.replace(DEPLOY, image=evil, command=evil, datacenters=(evil,), namespace=evil,
                                   node_pool=evil, host_volume=evil, data_dir=evil, service_name=evil,
                                   env={"NOMAD_ADDR": evil, "NOMAD_GPU_WATCH_NAMESPACES": evil})
    _, job = parse_job(render_service_job(settings))
    assert_allowed_shape("job", job)
    assert [text(dc) for dc in job["datacenters"]] == [evil]
    assert text(job["namespace"]) == evil and text(job["node_pool"]) == evil
    task = _task(job)
    assert text(only(task, "env")["NOMAD_GPU_WATCH_NAMESPACES"]) == evil
    assert text(only(task, "service")["name"]) == evil
    assert text(labelled(labelled(job, "group")["nomad-gpu"], "volume")["queue"]["source"]) == evil
    assert text(only(task, "volume_mount")["destination"]) == evil


@pytest.mark.parametrize(("change", "message"), [
    pytest.param({"env": {"NOMAD_TOKEN": "b5f9c1d0-0000-4000-8000-00000000beef"}}, "looks like a secret",
                 id="token-env"),
    pytest.param({"env": {"NOMAD_GPU_TOKEN": "x"}}, "Nomad Variable", id="admin-token-env"),
    pytest.param({"env": {"A B": "x"}}, "not a variable name", id="env-name"),
    pytest.param({"variable": 'nomad/jobs/x" }}{{ evil'}, "invalid Nomad Variable path", id="variable-quote"),
    pytest.param({"variable": "nomad"}, "invalid Nomad Variable path", id="variable-reserved"),
    pytest.param({"variable": None}, "TLS files come from a Nomad Variable", id="tls-without-variable"),
    pytest.param({"port": None}, "needs the port", id="service-without-port"),
    pytest.param({"driver": "qemu"}, "driver 'qemu'", id="driver"),
    pytest.param({"service_provider": "eureka"}, "service provider", id="provider"),
    pytest.param({"port": 70000}, "port 70000", id="port"),
])
def test_refused_settings(change: dict, message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render_service_job(dataclasses.replace(DEPLOY, **change))


@pytest.mark.parametrize("path", ["nomad/jobs/nomad-gpu", "ops/nomad-gpu", "a~b_c-d/e"])
def test_variable_paths_nomad_accepts(path: str) -> None:
    assert check_variable_path(path) == path


def test_the_ha_form_runs_replicas_on_distinct_nodes_with_the_database_url_from_the_variable() -> None:
    _, job = parse_job(render_service_job(dataclasses.replace(DEPLOY, replicas=3)))
    assert_allowed_shape("job", job)
    group = labelled(job, "group")["nomad-gpu"]
    assert group["count"] == 3
    (constraint,) = group["constraint"]
    assert target(constraint["operator"]) == "distinct_hosts" and target(constraint["value"]) == "true"
    assert "volume" not in group  # the queue lives in PostgreSQL, not on a node
    task = _task(job)
    assert "volume_mount" not in task
    args = _args(task)
    assert "--db" not in args and args[0] == "serve"  # the URL, with its password, never on the command line
    env_file = _templates(task)["secrets/nomad-gpu.env"]
    assert "NOMAD_GPU_DB={{ .db_url }}" in text(env_file["data"]).splitlines()
    assert "db_url" not in render_service_job(DEPLOY)  # one replica keeps its SQLite file on the host volume


def test_the_ha_form_needs_the_variable() -> None:
    with pytest.raises(RenderError, match="Variable"):
        render_service_job(dataclasses.replace(DEPLOY, replicas=2, variable=None, tls=False, nomad_ca=False,
                                               service_name=None))
