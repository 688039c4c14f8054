"""The node endpoints of the dev cluster's HTTP app: `GET /v1/nodes`, `/v1/node/:id` and its allocations.

One module per group of routes, each a function of what it reads (apikit.py says why).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import queries
from .apikit import Replies, flag
from .state import ClusterState


def node_routes(state: ClusterState, replies: Replies) -> list[Route]:
    reply = replies.reply

    def nodes(request: Request) -> Response:
        q = request.query_params
        return reply(queries.list_nodes(state, prefix=q.get("prefix", ""), resources=flag(request, "resources"),
                                        os_attr=flag(request, "os"), filter_expr=q.get("filter", "")), "nodes")

    def node(request: Request) -> Response:
        return reply(queries.get_node(state, request.path_params["node_id"]))

    def node_allocations(request: Request) -> Response:
        return reply(queries.node_allocations(state, request.path_params["node_id"]))

    return [
        Route("/v1/nodes", nodes, methods=["GET"]),
        Route("/v1/node/{node_id}", node, methods=["GET"]),
        Route("/v1/node/{node_id}/allocations", node_allocations, methods=["GET"]),
    ]
