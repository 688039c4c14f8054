"""The dev cluster's HTTP app serves every Nomad and `/_dev/` route it served when its routes lived in one
builder, each path once: the route modules (noderoutes, jobroutes, allocroutes, clusterroutes, varroutes,
devroutes) are assembled by `api.build_app`, and a route lost or doubled on the way would answer 404 or
the wrong handler. Built, not served: no socket is opened."""

from __future__ import annotations

from collections import Counter

from starlette.routing import Route

from nomad_gpu.devcluster.server import DevCluster

SERVED = {
    "/v1/nodes": {"GET"},
    "/v1/node/{node_id}": {"GET"},
    "/v1/node/{node_id}/allocations": {"GET"},
    "/v1/jobs": {"GET", "POST", "PUT"},
    "/v1/jobs/parse": {"POST", "PUT"},
    "/v1/job/{job_id}": {"GET", "POST", "PUT", "DELETE"},
    "/v1/job/{job_id}/submission": {"GET"},
    "/v1/job/{job_id}/allocations": {"GET"},
    "/v1/job/{job_id}/summary": {"GET"},
    "/v1/job/{job_id}/evaluations": {"GET"},
    "/v1/evaluations": {"GET"},
    "/v1/evaluation/{eval_id}": {"GET"},
    "/v1/system/gc": {"PUT"},
    "/v1/allocations": {"GET"},
    "/v1/allocation/{alloc_id}": {"GET"},
    "/v1/allocation/{alloc_id}/stop": {"POST", "PUT"},
    "/v1/client/allocation/{alloc_id}/stats": {"GET"},
    "/v1/client/fs/logs/{alloc_id}": {"GET"},
    "/v1/event/stream": {"GET"},
    "/v1/status/leader": {"GET"},
    "/v1/agent/members": {"GET"},
    "/v1/namespaces": {"GET"},
    "/v1/namespace/{name}": {"GET", "POST", "PUT", "DELETE"},
    "/v1/services": {"GET"},
    "/v1/service/{name}": {"GET"},
    "/v1/service/": {"GET"},
    "/_dev/audit": {"GET"},
    "/_dev/streams/drop": {"POST"},
    "/_dev/gc": {"POST"},
    "/_dev/unreachable": {"POST"},
    "/_dev/reachable": {"POST"},
    "/_dev/lose-replies": {"POST"},
    "/_dev/node/{node_id}/down": {"POST"},
    "/_dev/node/{node_id}/up": {"POST"},
    "/_dev/node/{node_id}/drain": {"POST"},
    "/_dev/node/{node_id}/undrain": {"POST"},
    "/_dev/node/{node_id}/eligible": {"POST"},
    "/_dev/node/{node_id}/ineligible": {"POST"},
    "/_dev/election": {"POST"},
    "/_dev/election/end": {"POST"},
}


def _routes() -> list[Route]:
    node = {"name": "n1", "gpus": [{"model": "A100", "memory_mib": 81920}]}
    cluster = DevCluster({"name": "routes", "nodes": [node]})
    return [r for r in cluster.app.routes if isinstance(r, Route)]


def test_every_route_is_served_with_its_methods() -> None:
    served = {r.path: (r.methods or set()) - {"HEAD"} for r in _routes()}
    missing = {path: methods for path, methods in SERVED.items() if served.get(path) != methods}
    assert not missing, {path: (want, served.get(path)) for path, want in missing.items()}


def test_no_path_is_served_twice() -> None:
    twice = [path for path, n in Counter(r.path for r in _routes()).items() if n > 1]
    assert not twice, twice
