"""Where an entry is reached, from the allocations Nomad reports (pure: no server), and which nodes a job
with a static port must not be admitted onto."""

from __future__ import annotations

from typing import Any

import pytest

from nomad_gpu.domain.ids import NodeId
from nomad_gpu.nomad.decode import AllocInfo, AllocStatus, decode_alloc
from nomad_gpu.render import parse_spec
from nomad_gpu.service.http.addresses import addresses
from nomad_gpu.service.life.portsinuse import blocked_nodes, port_note, ports_taken, static_ports


def _raw(alloc_id: str, group: str = "main", status: str = "running", ports: Any = (("http", 23456),),
         host: str = "10.0.0.2", created: int = 1) -> dict[str, Any]:
    return {"ID": alloc_id, "JobID": "q1", "TaskGroup": group, "NodeID": "n1", "ClientStatus": status,
            "DesiredStatus": "run", "CreateTime": created,
            "AllocatedResources": {"Tasks": {}, "Shared": {"DiskMB": 300, "Networks": None, "Ports": [
                {"Label": label, "Value": value, "To": 8000, "HostIP": host, "IgnoreCollision": False}
                for label, value in ports] or None}}}


def test_the_allocations_ports_are_decoded_from_shared_ports() -> None:
    alloc = decode_alloc(_raw("a1", ports=(("http", 23456), ("metrics", 9100))))
    assert [(p.label, p.host_ip, p.value, p.address) for p in alloc.ports] == [
        ("http", "10.0.0.2", 23456, "10.0.0.2:23456"), ("metrics", "10.0.0.2", 9100, "10.0.0.2:9100")]
    assert decode_alloc({"ID": "a2", "ClientStatus": "running"}).ports == ()


def test_an_ipv6_host_is_bracketed() -> None:
    (port,) = decode_alloc(_raw("a1", host="fd00::2")).ports
    assert port.address == "[fd00::2]:23456"


def test_a_running_allocation_gives_each_port_its_address() -> None:
    alloc = decode_alloc(_raw("a1", ports=(("http", 23456), ("metrics", 9100))))
    assert addresses([alloc]) == {"http": "10.0.0.2:23456", "metrics": "10.0.0.2:9100"}


@pytest.mark.parametrize("status", ["pending", "complete", "failed", "lost"])
def test_only_a_running_allocation_has_an_address(status: str) -> None:
    assert addresses([decode_alloc(_raw("a1", status=status))]) == {}


def test_an_allocation_being_stopped_has_none() -> None:
    raw = {**_raw("a1"), "DesiredStatus": "stop"}
    assert addresses([decode_alloc(raw)]) == {}


def test_a_name_several_allocations_share_is_keyed_by_group_then_allocation() -> None:
    allocs = [decode_alloc(_raw("aaaaaaaa-1", "a")), decode_alloc(_raw("bbbbbbbb-1", "b", ports=(("http", 2),))),
              decode_alloc(_raw("cccccccc-1", "b", ports=(("http", 3),), created=2))]
    assert addresses(allocs) == {"a.http": "10.0.0.2:23456", "b.http.bbbbbbbb": "10.0.0.2:2",
                                 "b.http.cccccccc": "10.0.0.2:3"}


def test_static_ports_of_a_spec() -> None:
    spec = parse_spec({"name": "s", "task": {"image": "x"}, "ports": {"http": None, "m": {"static": 9100}}})
    assert static_ports(spec) == frozenset({9100})
    assert static_ports(None) == frozenset()


def test_nodes_where_a_static_port_is_taken_are_blocked() -> None:
    held = AllocInfo("a1", "other", "g", NodeId("n1"), AllocStatus.RUNNING, "run",
                     ports=decode_alloc(_raw("x", ports=(("m", 9100),))).ports)
    ended = AllocInfo("a2", "old", "g", NodeId("n2"), AllocStatus.COMPLETE, "run",
                      ports=decode_alloc(_raw("y", ports=(("m", 9100),))).ports)
    taken = ports_taken([held, ended], pending=[("n3", frozenset({9100}))])
    assert taken == {NodeId("n1"): {9100}, NodeId("n3"): {9100}}
    assert blocked_nodes(frozenset({9100}), taken) == {NodeId("n1"), NodeId("n3")}
    assert blocked_nodes(frozenset({9101}), taken) == frozenset()


def test_the_reason_names_the_ports_and_the_nodes() -> None:
    taken = {NodeId(f"n{i}"): {9100, 9200} for i in range(5)}
    one = frozenset({NodeId("n0")})
    assert port_note(frozenset({9100}), taken, one, {NodeId("n0"): "gpu-1"}) == "static port 9100 in use on gpu-1"
    assert port_note(frozenset({9100, 9200, 9300}), taken, frozenset(taken), {}) == (
        "static ports 9100, 9200 in use on n0, n1, n2 and 2 more")
