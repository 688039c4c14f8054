"""The service describing itself: its Prometheus metrics and its OpenAPI document.

    GET    /metrics            Prometheus (a team's token sees its own team's series)
    GET    /openapi.json       this API described (OpenAPI 3.1; `openapi.py`)
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nomad_gpu.service.admission.access import caller_of, metrics_view
from nomad_gpu.service.http.apicontext import ApiContext
from nomad_gpu.service.http.openapi import document


def meta_routes(api: ApiContext) -> list[Route]:
    meta = MetaRoutes(api, document())
    return [Route("/metrics", meta.metrics, methods=["GET"]), Route("/openapi.json", meta.openapi, methods=["GET"])]


class MetaRoutes:
    def __init__(self, api: ApiContext, described: dict[str, Any]) -> None:
        self.api = api
        self.described = described

    async def metrics(self, request: Request) -> Response:
        api, caller = self.api, caller_of(request.scope)
        text = await run_in_threadpool(lambda: metrics_view(api.service.metrics.registry, caller,
                                                            show_teams=api.rules.metrics_open_teams))
        return Response(text, media_type="text/plain; version=0.0.4")

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(self.described)
