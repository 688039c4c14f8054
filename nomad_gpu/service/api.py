"""The HTTP API of the service (Starlette). Errors are JSON `{"error": "..."}` with a 4xx status.

    POST   /v1/jobs            submit a job or sweep spec (YAML or JSON body); Idempotency-Key honoured
    GET    /v1/jobs            list entries (?state=queued,running &sweep=ID &limit=N)
    GET    /v1/jobs/{id}       one entry, with its wait reason and placements
    DELETE /v1/jobs/{id}       cancel
    GET    /v1/sweeps/{id}     a sweep's progress
    GET    /v1/inventory       nodes with GPU, MIG and share capacity, free and total
    GET    /v1/status          service health and counts
    GET    /metrics            Prometheus
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any

import yaml
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nomad_gpu.domain.errors import InvalidRequest, UnknownEntry
from nomad_gpu.render import SpecError
from nomad_gpu.service.scheduler import SchedulerService
from nomad_gpu.store import EntryState

MAX_BODY = 1 << 20


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class _TokenAuth(BaseHTTPMiddleware):
    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if request.url.path == "/metrics":
            return await call_next(request)
        given = request.headers.get("x-nomad-gpu-token") or ""
        auth = request.headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            given = auth[7:]
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return error(401, "missing or wrong token (set NOMAD_GPU_TOKEN)")
        return await call_next(request)


def create_app(service: SchedulerService, token: str | None = None) -> Starlette:
    async def submit(request: Request) -> Response:
        body = await request.body()
        if len(body) > MAX_BODY:
            return error(413, f"spec larger than {MAX_BODY} bytes")
        try:
            data = _decode_body(body, request.headers.get("content-type", ""))
            entries = service.submit(data, idempotency_key=request.headers.get("idempotency-key"))
        except (SpecError, InvalidRequest) as exc:
            return error(400, str(exc))
        return JSONResponse({"entries": [e.to_json() for e in entries]}, status_code=201)

    async def list_jobs(request: Request) -> Response:
        states = None
        if raw := request.query_params.get("state"):
            try:
                states = [EntryState(s.strip()) for s in raw.split(",") if s.strip()]
            except ValueError:
                return error(400, f"unknown state in {raw!r}; known: {', '.join(s.value for s in EntryState)}")
        limit = request.query_params.get("limit")
        if limit is not None and not limit.isdigit():
            return error(400, "limit must be a non-negative integer")
        entries = service.store.list(states, sweep=request.query_params.get("sweep"),
                                     limit=int(limit) if limit else None)
        return JSONResponse({"entries": [e.to_json() for e in entries]})

    async def get_job(request: Request) -> Response:
        try:
            return JSONResponse(service.store.get(request.path_params["id"]).to_json())
        except UnknownEntry as exc:
            return error(404, str(exc.args[0]))

    async def cancel_job(request: Request) -> Response:
        try:
            return JSONResponse(service.cancel(request.path_params["id"]).to_json())
        except UnknownEntry as exc:
            return error(404, str(exc.args[0]))

    async def sweep(request: Request) -> Response:
        entries = service.store.list(sweep=request.path_params["id"])
        if not entries:
            return error(404, f"no sweep {request.path_params['id']!r}")
        counts: dict[str, int] = {}
        for e in entries:
            counts[e.state.value] = counts.get(e.state.value, 0) + 1
        return JSONResponse({"sweep": request.path_params["id"], "total": len(entries), "states": counts,
                             "trials": [e.to_json() for e in entries]})

    async def inventory(request: Request) -> Response:
        return JSONResponse({"nodes": service.inventory()})

    async def status(request: Request) -> Response:
        return JSONResponse(service.status())

    async def metrics(request: Request) -> Response:
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4")

    async def not_found(request: Request, exc: Exception) -> Response:
        return error(404, f"no such endpoint: {request.method} {request.url.path}")

    async def bad_method(request: Request, exc: Exception) -> Response:
        return error(405, f"method {request.method} not allowed on {request.url.path}")

    routes = [
        Route("/v1/jobs", submit, methods=["POST"]),
        Route("/v1/jobs", list_jobs, methods=["GET"]),
        Route("/v1/jobs/{id}", get_job, methods=["GET"]),
        Route("/v1/jobs/{id}", cancel_job, methods=["DELETE"]),
        Route("/v1/sweeps/{id}", sweep, methods=["GET"]),
        Route("/v1/inventory", inventory, methods=["GET"]),
        Route("/v1/status", status, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    middleware = [Middleware(_TokenAuth, token=token)] if token else []
    return Starlette(routes=routes, middleware=middleware, exception_handlers={404: not_found, 405: bad_method})


def _decode_body(body: bytes, content_type: str) -> Any:
    text = body.decode("utf-8", errors="strict") if body else ""
    if not text.strip():
        raise SpecError("empty request body: send a job spec (YAML or JSON)")
    try:
        if "json" in content_type:
            return json.loads(text)
        return yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise SpecError(f"body is not valid {'JSON' if 'json' in content_type else 'YAML'}: {exc}") from exc
