"""The evaluation and allocation endpoints of the dev cluster's HTTP app: what the scheduler made of the
jobs (`/v1/evaluations`, `/v1/allocations`, one of each, an allocation's stop) and what a client reports
of an allocation (its stats and task logs).

One module per group of routes, each a function of what it reads (apikit.py says why).
"""

from __future__ import annotations

import functools

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import logs, queries, usage
from .apikit import Replies, flag, namespace_of
from .state import ClusterState


def evaluation_routes(state: ClusterState, replies: Replies) -> list[Route]:
    reply, visible = replies.reply, replies.visible

    def evaluations(request: Request) -> Response:
        q = request.query_params
        return reply(visible(request, queries.list_evaluations(state, namespace=namespace_of(request),
                                                               prefix=q.get("prefix", ""),
                                                               filter_expr=q.get("filter", ""))), "evals")

    def evaluation(request: Request) -> Response:
        return reply(queries.get_evaluation(state, request.path_params["eval_id"]))

    return [
        Route("/v1/evaluations", evaluations, methods=["GET"]),
        Route("/v1/evaluation/{eval_id}", evaluation, methods=["GET"]),
    ]


def alloc_routes(state: ClusterState, replies: Replies) -> list[Route]:
    reply, written, visible = replies.reply, replies.written, replies.visible

    def allocations(request: Request) -> Response:
        q = request.query_params
        task_states = q.get("task_states") is None or flag(request, "task_states")
        return reply(visible(request, queries.list_allocations(
            state, namespace=namespace_of(request), prefix=q.get("prefix", ""), resources=flag(request, "resources"),
            task_states=task_states, filter_expr=q.get("filter", ""))), "allocs")

    def allocation(request: Request) -> Response:
        return reply(queries.get_allocation(state, request.path_params["alloc_id"]))

    def allocation_stats(request: Request) -> Response:
        """`GET /v1/client/allocation/:id/stats` (usage.py)."""
        return reply(usage.alloc_stats(state, request.path_params["alloc_id"], request.query_params.get("task", "")))

    async def stop_allocation(request: Request) -> Response:
        return written(await run_in_threadpool(state.stop_alloc, request.path_params["alloc_id"]))

    return [
        Route("/v1/allocations", allocations, methods=["GET"]),
        Route("/v1/allocation/{alloc_id}", allocation, methods=["GET"]),
        Route("/v1/allocation/{alloc_id}/stop", stop_allocation, methods=["POST", "PUT"]),
        Route("/v1/client/allocation/{alloc_id}/stats", allocation_stats, methods=["GET"]),
        Route("/v1/client/fs/logs/{alloc_id}", functools.partial(logs.fs_logs, state), methods=["GET"]),
    ]
