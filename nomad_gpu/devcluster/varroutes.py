"""The HTTP routes of Nomad Variables (variables.py) and of the dev cluster's workload identities.

The ACL gate lets these through (acl.requirement): they judge the token themselves, by path, as
`nomad/variables_endpoint.go` does (v2.0.5), and a workload identity is not an ACL token.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from .acl import PERMISSION_DENIED, TOKEN_NOT_FOUND, Acl, TokenNotFound, token_of
from .allocs import Alloc
from .variables import Identities, VariableError, VariableStore, WorkloadClaim


def variable_routes(store: VariableStore, identities: Identities, acl: Acl,
                    alloc_of: Callable[[str], Alloc | None]) -> list[Route]:
    def allowed(request: Request, namespace: str, path: str, capability: str) -> bool:
        if not acl.enabled:
            return True
        secret = token_of(request)
        claim = identities.claim(secret)
        if claim is not None:  # terminal allocations' identities are refused (`groupForAlloc`)
            alloc = alloc_of(claim.alloc_id)
            live = alloc is not None and not alloc.client_status.is_terminal()
            return live and capability in ("read", "list") and claim.may_read(namespace, path)
        return acl.resolve(secret).allows_variable(namespace, path, capability)

    def guarded(handler: Callable[[Request, bytes], Response]) -> Callable[[Request], Awaitable[Response]]:
        """Read the body on the loop, run the handler in the pool; refusals become Nomad's plain-text answers."""
        async def endpoint(request: Request) -> Response:
            body = await request.body()
            try:
                return await run_in_threadpool(handler, request, body)
            except TokenNotFound:
                return PlainTextResponse(TOKEN_NOT_FOUND, status_code=403)
            except VariableError as exc:
                return PlainTextResponse(str(exc), status_code=exc.status)
        return endpoint

    def one(request: Request, body: bytes) -> Response:
        path = request.path_params["path"]
        if not path:
            raise VariableError(400, "missing variable path")
        namespace = request.query_params.get("namespace") or "default"
        cas = _cas(request.query_params.get("cas"))
        if request.method == "GET":
            if not allowed(request, namespace, path, "read"):
                return PlainTextResponse(PERMISSION_DENIED, status_code=403)
            found = store.get(namespace, path)
            return JSONResponse(found, headers={"X-Nomad-Index": str(found["ModifyIndex"])})
        if request.method == "DELETE":
            if not allowed(request, namespace, path, "destroy"):
                return PlainTextResponse(PERMISSION_DENIED, status_code=403)
            status, conflict = store.delete(namespace, path, cas, allowed(request, namespace, path, "read"))
            return Response(status_code=204) if conflict is None else JSONResponse(conflict, status_code=status)
        try:
            raw = json.loads(body)
        except ValueError as exc:
            raise VariableError(400, f"invalid character in the body: {exc}") from None
        if not isinstance(raw, dict) or not raw.get("Items"):
            raise VariableError(400, "variable missing required Items object")
        namespace = str(raw.get("Namespace") or namespace)  # the Variable's own first (`Variables.Apply`)
        if not allowed(request, namespace, path, "write"):
            return PlainTextResponse(PERMISSION_DENIED, status_code=403)
        status, written = store.put(namespace, path, raw["Items"], cas, allowed(request, namespace, path, "read"))
        return JSONResponse(written, status_code=status, headers={"X-Nomad-Index": str(written["ModifyIndex"])})

    def listing(request: Request, _body: bytes) -> Response:
        namespace = request.query_params.get("namespace") or "default"
        prefix = request.query_params.get("prefix") or ""
        return JSONResponse(store.list(namespace, prefix, lambda ns, p: allowed(request, ns, p, "list")))

    def identity(request: Request, _body: bytes) -> Response:
        alloc = alloc_of(request.path_params["alloc_id"])
        if alloc is None or alloc.client_status.is_terminal():
            return PlainTextResponse("alloc not found or terminal", status_code=404)
        task = request.query_params.get("task") or (alloc.tasks[0].name if alloc.tasks else "")
        claim = WorkloadClaim(alloc.namespace, alloc.job_id, alloc.task_group, task, alloc.id)
        return JSONResponse({"Token": identities.issue(claim)})

    return [
        Route("/v1/var/{path:path}", guarded(one), methods=["GET", "PUT", "POST", "DELETE"]),
        Route("/v1/vars", guarded(listing), methods=["GET"]),
        Route("/_dev/allocation/{alloc_id}/identity", guarded(identity), methods=["GET"]),
    ]


def _cas(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    if not text.isdigit():
        raise VariableError(400, f'can not parse cas: strconv.ParseUint: parsing "{text}": invalid syntax')
    return int(text)


__all__ = ["variable_routes"]
