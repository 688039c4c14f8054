"""`ports:` and `service:`: validated as Nomad would, rendered as the group's `network` and `service` blocks,
and read back by a real HCL2 parser (python-hcl2) and by the dev cluster's `/v1/jobs/parse` mapping."""

from __future__ import annotations

from typing import Any

import pytest

from nomad_gpu.devcluster.hcl import parse_job_hcl
from nomad_gpu.render import SpecError, parse_spec, render_job

from .hclview import labelled, only, parse_job, text
from .helpers import placement_for

SERVING = {
    "name": "chat", "template": "service", "class": "serving",
    "task": {"image": "vllm/vllm-openai:v0.6.3", "args": ["--port", "8000"]},
    "gpu": {"count": 1},
    "ports": {"http": {"to": 8000}, "metrics": {"static": 9100}},
    "service": {"name": "chat", "port": "http", "tags": ["llm"], "check": {"type": "http", "path": "/health"}},
}


def _spec(data: dict[str, Any]) -> Any:
    return parse_spec(data)


def _rendered(data: dict[str, Any]) -> str:
    spec = _spec(data)
    return render_job(spec, job_id="chat-e1", placement=placement_for(spec))


def _group(source: str) -> dict[str, Any]:
    _, job = parse_job(source)
    return labelled(job, "group")["main"]


def test_ports_and_service_render_as_group_blocks_a_real_hcl2_parser_reads() -> None:
    group = _group(_rendered(SERVING))
    ports = labelled(only(group, "network"), "port")
    assert {label: {k: v for k, v in body.items() if not k.startswith("__")} for label, body in ports.items()} == {
        "http": {"to": 8000}, "metrics": {"static": 9100}}
    service = only(group, "service")
    assert [text(service[k]) for k in ("name", "port", "provider")] == ["chat", "http", "nomad"]
    assert [text(tag) for tag in service["tags"]] == ["llm"]
    check = only(service, "check")
    assert {k: text(check[k]) for k in ("type", "path", "interval", "timeout")} == {
        "type": "http", "path": "/health", "interval": "10s", "timeout": "2s"}
    config = only(labelled(group, "task")["main"], "config")
    assert [text(p) for p in config["ports"]] == ["http", "metrics"]  # docker publishes what it names


def test_the_dev_cluster_parses_the_rendered_blocks_into_nomads_job_json() -> None:
    job = parse_job_hcl(_rendered(SERVING))
    (group,) = job["TaskGroups"]
    (network,) = group["Networks"]
    assert [(p["Label"], p["Value"], p["To"]) for p in network["DynamicPorts"]] == [("http", 0, 8000)]
    assert [(p["Label"], p["Value"], p["To"]) for p in network["ReservedPorts"]] == [("metrics", 9100, 0)]
    (service,) = group["Services"]
    assert (service["Name"], service["PortLabel"], service["Provider"]) == ("chat", "http", "nomad")
    (check,) = service["Checks"]
    assert (check["Type"], check["Path"], check["Interval"], check["Timeout"]) == ("http", "/health", 10**10, 2 * 10**9)


def test_consul_is_rendered_faithfully_and_a_tcp_check_has_no_path() -> None:
    data = {**SERVING, "service": {"name": "chat", "port": "http", "provider": "consul",
                                   "check": {"type": "tcp", "interval": "30s", "timeout": "5s"}}}
    job = parse_job_hcl(_rendered(data))
    (service,) = job["TaskGroups"][0]["Services"]
    assert service["Provider"] == "consul"
    (check,) = service["Checks"]
    assert (check["Type"], check["Path"], check["Interval"], check["Timeout"]) == ("tcp", "", 30 * 10**9, 5 * 10**9)


def test_a_job_without_ports_renders_no_network_or_service() -> None:
    data = {k: v for k, v in SERVING.items() if k not in ("ports", "service")}
    group = _group(_rendered(data))
    assert "network" not in group and "service" not in group
    assert "ports" not in only(labelled(group, "task")["main"], "config")


def test_a_non_docker_task_gets_the_network_without_a_docker_port_list() -> None:
    data = {**SERVING, "task": {"driver": "exec", "command": "/bin/serve"}}
    group = _group(_rendered(data))
    assert "network" in group
    assert "ports" not in only(labelled(group, "task")["main"], "config")


def test_top_level_keys_belong_to_the_one_group_of_a_groups_spec() -> None:
    data = {"name": "nb", "ports": {"http": {"to": 8888}}, "service": {"name": "nb", "port": "http"},
            "groups": [{"name": "lab", "task": {"image": "jupyter/base-notebook"}}]}
    (group,) = _spec(data).groups
    assert set(group.ports) == {"http"} and group.service is not None and group.service.check is None


def test_a_group_carries_its_own_ports() -> None:
    data = {"name": "pair", "groups": [
        {"name": "a", "task": {"image": "x"}, "ports": {"http": None}},
        {"name": "b", "task": {"image": "x"}, "ports": {"grpc": {"static": 50051}}}]}
    a, b = _spec(data).groups
    assert a.ports["http"].static is None and a.ports["http"].to is None
    assert b.ports["grpc"].static == 50051


@pytest.mark.parametrize(("change", "words"), [
    pytest.param({"service": {"name": "chat", "port": "web"}}, "service.port 'web' is not one of the group's ports",
                 id="unknown-port"),
    pytest.param({"service": {"name": "chat_bot", "port": "http"}}, "a service name", id="bad-service-name"),
    pytest.param({"service": {"name": "chat", "port": "http", "check": {"type": "http"}}}, "needs a path",
                 id="http-without-path"),
    pytest.param({"service": {"name": "chat", "port": "http", "check": {"type": "http", "path": "http://x/"}}},
                 "relative URL path", id="absolute-path"),
    pytest.param({"service": {"name": "chat", "port": "http", "check": {"type": "script"}}}, "'http' or 'tcp'",
                 id="script-check"),
    pytest.param({"service": {"name": "chat", "port": "http",
                              "check": {"type": "tcp", "interval": "500ms"}}},
                 "service.check.interval: must be >= 1", id="short-interval"),
    pytest.param({"ports": {"http": {"static": 70000}}, "service": None}, "ports.http.static: must be <= 65535",
                 id="static-out-of-range"),
    pytest.param({"ports": {"http-port": {"to": 80}}, "service": None}, "a port name", id="bad-label"),
    pytest.param({"ports": {"http": {"to": 80, "host": "x"}}, "service": None}, "ports.http.host: unknown field",
                 id="unknown-key"),
    pytest.param({"service": {"name": "chat", "port": "http", "provider": "etcd"}}, "'nomad' or 'consul'",
                 id="bad-provider"),
])
def test_a_port_or_service_nomad_would_refuse_is_refused_with_its_place(change: dict[str, Any], words: str) -> None:
    data = {**SERVING, **change}
    if data.get("service") is None:
        data.pop("service", None)
    with pytest.raises(SpecError) as refused:
        _spec(data)
    assert words in "\n".join(refused.value.errors)


def test_top_level_ports_with_several_groups_are_refused() -> None:
    data = {"name": "pair", "ports": {"http": None},
            "groups": [{"name": "a", "task": {"image": "x"}}, {"name": "b", "task": {"image": "x"}}]}
    with pytest.raises(SpecError) as refused:
        _spec(data)
    assert "give each group its own" in str(refused.value)


def test_a_stored_spec_re_parses_to_the_same_ports() -> None:
    spec = _spec(SERVING)
    again = parse_spec(spec.model_dump(mode="json"))
    assert again == spec


def test_a_static_port_is_refused_where_one_node_would_need_it_twice() -> None:
    counted = {**SERVING, "count": 2}
    with pytest.raises(SpecError) as refused:
        _spec(counted)
    assert "static port 9100 (metrics) with count 2" in str(refused.value)
    twice = {"name": "pair", "groups": [
        {"name": "a", "task": {"image": "x"}, "ports": {"m": {"static": 9100}}},
        {"name": "b", "task": {"image": "x"}, "ports": {"n": {"static": 9100}}}]}
    with pytest.raises(SpecError) as refused:
        _spec(twice)
    assert "static port 9100 is also in groups[a]" in str(refused.value)
    dynamic = {**SERVING, "count": 2, "ports": {"http": {"to": 8000}}}
    assert _spec(dynamic).groups[0].count == 2
