"""The cluster-wide endpoints of the dev cluster's HTTP app: the system GC, the leader and agent status,
namespaces, and the native service catalogue (services.py).

One module per group of routes, each a function of what it reads (apikit.py says why).
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from . import gc, queries, services
from . import namespaces as namespace_ops
from .acl import TOKEN_NOT_FOUND, Acl, TokenNotFound, token_of
from .apikit import Replies, index_headers, namespace_of, read_body
from .state import ClusterState
from .version import NomadVersion


def system_routes(state: ClusterState, replies: Replies, version: NomadVersion) -> list[Route]:
    """`/v1/system/gc`, `/v1/status/leader` and `/v1/agent/members`."""
    reply = replies.reply

    def system_gc(request: Request) -> Response:
        """`PUT /v1/system/gc`: enqueues a forced GC and answers 200 with no body before it runs
        (`command/agent/system_endpoint.go`, `nomad/system_endpoint.go`, v2.0.5)."""
        state.timers.call_soon(lambda: gc.force(state))
        return Response(status_code=200, headers={"X-Nomad-Index": str(state.index)})

    def agent_members(_: Request) -> Response:
        """`GET /v1/agent/members` (`AgentMembersRequest`, command/agent/agent_endpoint.go v2.0.3):
        the gossip pool's servers as `ServerMembersResponse`; `Tags["build"]` is each server's
        version (`setupSerf`, nomad/server.go). The dev cluster is one server of the version it plays."""
        member = {"Name": "devcluster.global", "Addr": "127.0.0.1", "Port": 4648,
                  "Tags": {"build": str(version), "role": "nomad", "region": "global", "dc": "dc1",
                           "port": "4647"},
                  "Status": "alive", "ProtocolMin": 1, "ProtocolMax": 5, "ProtocolCur": 2,
                  "DelegateMin": 2, "DelegateMax": 5, "DelegateCur": 4}
        return reply({"ServerName": "devcluster.global", "ServerRegion": "global", "ServerDC": "dc1",
                      "Members": [member]})

    def leader(request: Request) -> Response:
        """`Status.Leader` (nomad/status_endpoint.go, v2.0.5): `""` while the servers have no leader; only a
        `?stale` read gets that far then (election.py)."""
        return reply("127.0.0.1:4647" if state.election.has_leader else "")

    return [
        Route("/v1/system/gc", system_gc, methods=["PUT"]),
        Route("/v1/status/leader", leader, methods=["GET"]),
        Route("/v1/agent/members", agent_members, methods=["GET"]),
    ]


def namespace_routes(state: ClusterState, replies: Replies, acl: Acl) -> list[Route]:
    """`/v1/namespaces` and `/v1/namespace/:name`."""
    reply = replies.reply

    def namespaces(request: Request) -> Response:
        """`GET /v1/namespaces` (`command/agent/namespace_endpoint.go`, v2.0.5): the cluster file's
        namespaces and those created since; `X-Nomad-Index` is the namespaces table's index."""
        listing = namespace_ops.listing(state)
        if acl.enabled:  # the namespaces the token has any capability in (`Namespace.ListNamespaces`)
            try:
                token = acl.resolve(token_of(request))
            except TokenNotFound:
                return PlainTextResponse(TOKEN_NOT_FOUND, status_code=403)
            listing = [n for n in listing if token.management or token.capabilities(n["Name"])]
        return JSONResponse(listing, headers=index_headers(state.namespace_index))

    async def namespace(request: Request) -> Response:
        """`GET`, `POST`/`PUT` (create or update) and `DELETE /v1/namespace/:name`
        (`NamespaceSpecificRequest`, command/agent/namespace_endpoint.go, v2.0.5): writes answer `null`."""
        name = request.path_params["name"]
        try:
            if request.method == "GET":
                return reply(namespace_ops.get(state, name))
            if request.method == "DELETE":
                index = await run_in_threadpool(namespace_ops.delete, state, name)
            else:
                body = await read_body(request)
                index = await run_in_threadpool(namespace_ops.upsert, state, name, body)
        except namespace_ops.NamespaceError as exc:
            return PlainTextResponse(str(exc), status_code=exc.status)
        return JSONResponse(None, headers={"X-Nomad-Index": str(index)})  # `setIndex`, as namespaceUpdate does

    return [
        Route("/v1/namespaces", namespaces, methods=["GET"]),
        Route("/v1/namespace/{name}", namespace, methods=["GET", "POST", "PUT", "DELETE"]),
    ]


def service_routes(state: ClusterState, replies: Replies) -> list[Route]:
    """`/v1/services` and `/v1/service/:name` (services.py)."""
    reply, visible = replies.reply, replies.visible

    def service_list(request: Request) -> Response:
        return reply(visible(request, services.listing(state, namespace_of(request))), "service_registrations")

    def service(request: Request) -> Response:
        name = request.path_params.get("name", "")
        if not name:  # `/v1/service/` (command/agent/service_registration_endpoint.go, v2.0.5)
            raise queries.BadRequest("missing service name")
        return reply(visible(request, services.by_name(state, namespace_of(request), name)), "service_registrations")

    return [
        Route("/v1/services", service_list, methods=["GET"]),
        Route("/v1/service/{name}", service, methods=["GET"]),
        Route("/v1/service/", service, methods=["GET"]),
    ]
