"""Nomad Variables on the dev cluster (`command/agent/variable_endpoint.go`, `nomad/variables_endpoint.go`,
`nomad/structs/variables.go`, `acl/acl.go` AllowVariableOperation; v2.0.5): put, read, list, delete, check-and-
set, validation, path ACLs, and a task's implicit read of its own job's Variables."""

from __future__ import annotations

from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.acl import AclToken

from .conftest import TWO_NODES, ClusterFactory
from .helpers import job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`

OPERATOR = AclToken("operator", management=True)
OPS_READER = AclToken("ops-reader", {"default": ("read",)}, variables={"default": {"ops/*": ("read",)}})
OPS_WRITER = AclToken("ops-writer", variables={"*": {"ops/*": ("write", "read"), "ops/locked": ("deny",)}})
NO_VARIABLES = AclToken("svc", {"*": ("write",)}, node="read")
TOKENS = (OPERATOR, OPS_READER, OPS_WRITER, NO_VARIABLES)


def _var(cluster: DevCluster, method: str, path: str, token: str | None = None, body: Any = None,
         **params: str) -> requests.Response:
    headers = {"X-Nomad-Token": token} if token else {}
    return requests.request(method, f"{cluster.url}/v1/var/{path}", json=body, params=params, headers=headers,
                            timeout=5)


def test_put_read_list_delete(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    put = _var(cluster, "PUT", "nomad/jobs/nomad-gpu", body={"Items": {"config": "a: 1\n", "nomad_token": "t"}})
    assert put.status_code == 200, put.text
    written = put.json()
    assert written["Items"] == {"config": "a: 1\n", "nomad_token": "t"}
    assert (written["Namespace"], written["Path"]) == ("default", "nomad/jobs/nomad-gpu")
    assert written["CreateIndex"] == written["ModifyIndex"] == int(put.headers["X-Nomad-Index"]) > 0
    read = _var(cluster, "GET", "nomad/jobs/nomad-gpu")
    assert read.status_code == 200 and read.json() == written
    listed = requests.get(f"{cluster.url}/v1/vars", params={"prefix": "nomad/"}, timeout=5).json()
    assert listed == [{k: v for k, v in written.items() if k != "Items"}]  # metadata only, never items
    again = _var(cluster, "PUT", "nomad/jobs/nomad-gpu", body={"Items": {"config": "b: 2\n"}}).json()
    assert again["Items"] == {"config": "b: 2\n"}  # a put replaces every item
    assert again["CreateIndex"] == written["CreateIndex"] < again["ModifyIndex"]
    assert _var(cluster, "GET", "nomad/jobs/nomad-gpu", namespace="other").status_code == 404
    assert _var(cluster, "DELETE", "nomad/jobs/nomad-gpu").status_code == 204
    gone = _var(cluster, "GET", "nomad/jobs/nomad-gpu")
    assert (gone.status_code, gone.text) == (404, "variable not found")


@pytest.mark.parametrize(("path", "body", "status", "text"), [
    pytest.param("a", {}, 400, "variable missing required Items object", id="no-items"),
    pytest.param("a", {"Items": {}}, 400, "variable missing required Items object", id="empty-items"),
    pytest.param("nomad", {"Items": {"k": "v"}}, 500, '"nomad" is a reserved', id="reserved"),
    pytest.param("nomad/other", {"Items": {"k": "v"}}, 500, '"nomad" is a reserved', id="reserved-below"),
    pytest.param("a.b", {"Items": {"k": "v"}}, 500, 'invalid path "a.b"', id="dot"),
    pytest.param("a", {"Items": {"k": "v" * (64 * 1024)}}, 500, "limited to 64KiB", id="too-big"),
    pytest.param("a", {"Namespace": "*", "Items": {"k": "v"}}, 500, 'wildcard ("*")', id="wildcard-ns"),
])
def test_what_nomad_refuses(make_cluster: ClusterFactory, path: str, body: Any, status: int, text: str) -> None:
    cluster = make_cluster(TWO_NODES)
    answer = _var(cluster, "PUT", path, body=body)
    assert answer.status_code == status and text in answer.text


def test_check_and_set(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    first = _var(cluster, "PUT", "ops/x", body={"Items": {"k": "1"}}, cas="0").json()
    taken = _var(cluster, "PUT", "ops/x", body={"Items": {"k": "2"}}, cas="0")
    assert taken.status_code == 409 and taken.json()["Items"] == {"k": "1"}  # the one in the way
    stale = _var(cluster, "PUT", "ops/x", body={"Items": {"k": "2"}}, cas=str(first["ModifyIndex"] + 100))
    assert stale.status_code == 409 and stale.json()["ModifyIndex"] == first["ModifyIndex"]
    ok = _var(cluster, "PUT", "ops/x", body={"Items": {"k": "2"}}, cas=str(first["ModifyIndex"]))
    assert ok.status_code == 200 and ok.json()["Items"] == {"k": "2"}
    assert _var(cluster, "PUT", "ops/x", body={"Items": {"k": "3"}}, cas="x").status_code == 400
    assert _var(cluster, "DELETE", "ops/x", cas=str(first["ModifyIndex"])).status_code == 409
    assert _var(cluster, "DELETE", "ops/x", cas=str(ok.json()["ModifyIndex"])).status_code == 204


def test_path_acls(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster({**TWO_NODES, "namespaces": ["ml"]}, acl_tokens=TOKENS)
    assert _var(cluster, "PUT", "ops/db", "operator", {"Items": {"url": "x"}}).status_code == 200
    assert _var(cluster, "PUT", "ops/db", None, {"Items": {"url": "y"}}).status_code == 403  # anonymous
    unknown = _var(cluster, "GET", "ops/db", "nope")
    assert (unknown.status_code, unknown.text) == (403, "ACL token not found")
    assert _var(cluster, "GET", "ops/db", "ops-reader").json()["Items"] == {"url": "x"}
    assert _var(cluster, "PUT", "ops/db", "ops-reader", {"Items": {"url": "y"}}).status_code == 403
    assert _var(cluster, "GET", "ops/db", "svc").status_code == 403  # namespace write grants no Variables
    assert _var(cluster, "PUT", "ops/db", "ops-writer", {"Items": {"url": "y"}}).status_code == 200
    assert _var(cluster, "PUT", "ops/locked", "ops-writer", {"Items": {"k": "v"}}).status_code == 403  # deny wins
    assert _var(cluster, "DELETE", "ops/db", "ops-writer").status_code == 403  # write is not destroy
    assert _var(cluster, "PUT", "other/x", "operator", {"Items": {"k": "v"}}).status_code == 200
    listed = requests.get(f"{cluster.url}/v1/vars", headers={"X-Nomad-Token": "ops-reader"}, timeout=5).json()
    assert [v["Path"] for v in listed] == ["ops/db"]  # read implies list; other/x is not listed


def test_a_task_reads_its_own_jobs_variables(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES, acl_tokens=TOKENS)
    for path in ("nomad/jobs/nomad-gpu", "nomad/jobs/nomad-gpu/main/work", "nomad/jobs/other", "ops/db"):
        assert _var(cluster, "PUT", path, "operator", {"Items": {"k": path}}).status_code == 200
    client = nomad.Nomad(address=cluster.url, timeout=5, token="operator")
    submit(client, jobspec("nomad-gpu", duration=3600, job_type="service"))
    (alloc,) = wait_until(lambda: job_allocs(cluster.audit(), "nomad-gpu"))
    answer = requests.get(f"{cluster.url}/_dev/allocation/{alloc['alloc_id']}/identity", timeout=5)
    identity = answer.json()["Token"]
    assert _var(cluster, "GET", "nomad/jobs/nomad-gpu", identity).json()["Items"] == {"k": "nomad/jobs/nomad-gpu"}
    assert _var(cluster, "GET", "nomad/jobs/nomad-gpu/main/work", identity).status_code == 200
    assert _var(cluster, "GET", "nomad/jobs/other", identity).status_code == 403
    assert _var(cluster, "GET", "ops/db", identity).status_code == 403
    assert _var(cluster, "PUT", "nomad/jobs/nomad-gpu", identity, {"Items": {"k": "v"}}).status_code == 403
    assert _var(cluster, "GET", "nomad/jobs/nomad-gpu", identity, namespace="ml").status_code == 403
    client.job.deregister_job("nomad-gpu")
    wait_until(lambda: all(a["finished_at"] is not None for a in job_allocs(cluster.audit(), "nomad-gpu")))
    assert _var(cluster, "GET", "nomad/jobs/nomad-gpu", identity).status_code == 403  # its allocation ended
