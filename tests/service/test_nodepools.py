"""The one node pool a submission runs in (issue 31, item 1): its own, else its namespace's default in
Nomad, else `default`, and only if the service and the token open it. Pure: no server, no Nomad."""

from __future__ import annotations

from typing import Any

import pytest

from nomad_gpu.domain.errors import NotAllowed
from nomad_gpu.domain.ids import EntryId, NodeId, Team
from nomad_gpu.domain.inventory import Node
from nomad_gpu.nomad.client import NomadUnavailable
from nomad_gpu.render import JobSpec, parse_spec
from nomad_gpu.service.admission.nodepools import NamespacePools, allowed_pool, job_pool, namespace_default_pool
from nomad_gpu.service.asks.translate import job_request
from nomad_gpu.service.config.settings import AccessSettings, Grant
from nomad_gpu.store import QueueEntry

OPEN = AccessSettings(node_pools=frozenset({"default", "reserved"}))
DEFAULT_ONLY = AccessSettings(node_pools=frozenset({"default"}))


@pytest.mark.parametrize(("named", "namespace_default", "pool"), [
    pytest.param("gpu", "reserved", "gpu", id="the-spec-wins"),
    pytest.param(None, "reserved", "reserved", id="the-namespace-default"),
    pytest.param(None, None, "default", id="else-default"),
    pytest.param("", "", "default", id="empty-is-none"),
])
def test_the_pool_nomad_runs_a_job_in(named: str | None, namespace_default: str | None, pool: str) -> None:
    assert job_pool(named, namespace_default) == pool


@pytest.mark.parametrize(("named", "namespace_default", "rules", "pool"), [
    pytest.param(None, None, DEFAULT_ONLY, "default", id="no-pool-is-default"),
    pytest.param(None, None, OPEN, "default", id="no-pool-never-any-pool"),
    pytest.param(None, "reserved", OPEN, "reserved", id="namespace-default-when-open"),
    pytest.param("reserved", None, OPEN, "reserved", id="named-and-open"),
    pytest.param("all", None, AccessSettings(node_pools=frozenset({"*"})), "all", id="star-opens-all"),
])
def test_a_pool_the_rules_open(named: str | None, namespace_default: str | None, rules: AccessSettings,
                               pool: str) -> None:
    assert allowed_pool(named, namespace_default, rules) == pool


@pytest.mark.parametrize(("named", "namespace_default", "says"), [
    pytest.param("reserved", None, "'reserved' is not open", id="named"),
    pytest.param(None, "reserved", "its namespace's default pool is 'reserved'", id="namespace-default"),
    pytest.param("all", None, "'all' is not open", id="all-is-not-default"),
])
def test_a_pool_outside_the_rules_is_refused(named: str | None, namespace_default: str | None, says: str) -> None:
    with pytest.raises(NotAllowed, match=says):
        allowed_pool(named, namespace_default, DEFAULT_ONLY)


def test_a_grant_narrows_the_pool_choice() -> None:
    narrowed = OPEN.narrowed(Grant(node_pools=frozenset({"default"})))
    assert allowed_pool(None, None, narrowed) == "default"
    with pytest.raises(NotAllowed):
        allowed_pool(None, "reserved", narrowed)


@pytest.mark.parametrize(("namespace", "pool"), [
    pytest.param({"Name": "ml", "NodePoolConfiguration": None}, None, id="ce-none"),
    pytest.param({"Name": "ml", "NodePoolConfiguration": {"Default": "gpu", "Allowed": None}}, "gpu", id="ent"),
    pytest.param({"Name": "ml", "NodePoolConfiguration": {"Default": ""}}, None, id="empty"),
    pytest.param(None, None, id="no-namespace"),
    pytest.param({"NodePoolConfiguration": {"Default": 7}}, None, id="not-a-name"),
])
def test_a_namespace_default_pool_as_nomad_answers_it(namespace: Any, pool: str | None) -> None:
    assert namespace_default_pool(namespace) == pool


def test_namespace_pools_are_read_once_per_ttl_and_an_unreachable_nomad_is_none() -> None:
    reads: list[str] = []
    now = [0.0]

    def read(name: str) -> Any:
        reads.append(name)
        if name == "down":
            raise NomadUnavailable("connection refused")
        return {"Name": name, "NodePoolConfiguration": {"Default": f"{name}-pool"}}

    pools = NamespacePools(read, ttl_s=30.0, clock=lambda: now[0])
    assert pools("ml") == "ml-pool" and pools("ml") == "ml-pool" and reads == ["ml"]
    now[0] = 31.0
    assert pools("ml") == "ml-pool" and reads == ["ml", "ml"]
    assert pools("down") is None


def test_an_entry_stored_without_a_pool_is_placed_in_default_only() -> None:
    spec = parse_spec({"name": "j", "task": {"image": "i"}, "gpu": {"count": 1}})
    assert isinstance(spec, JobSpec) and spec.node_pool is None  # stored before the pool was bound at submit
    request = job_request(QueueEntry(id="q1", name="j", team="t", priority=50, spec={}, submitted_at=0.0), spec)
    assert request.node_pool == "default"
    assert request.places_on(Node(NodeId("a"), node_pool="default"))
    assert not request.places_on(Node(NodeId("b"), node_pool="reserved"))
    assert request.entry == EntryId("q1") and request.team == Team("t")
