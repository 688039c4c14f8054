"""What every route module of the dev cluster's HTTP app shares: reading a request's flags, namespace and
JSON body by Nomad's rules, and writing a reply with Nomad's index headers.

It exists so that the route modules (`noderoutes.py`, `jobroutes.py`, `allocroutes.py`,
`clusterroutes.py`, `devroutes.py`) are functions of their explicit dependencies, not closures over
one builder's locals: a reply's `X-Nomad-Index` depends on the state and a `namespace=*` list on the ACL
tokens, so `Replies` carries both.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from . import queries
from .acl import Acl, token_of
from .state import ClusterState

Endpoint = Callable[[Request], Awaitable[Response]]
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def flag(request: Request, name: str) -> bool:
    """A boolean query parameter by Go's ParseBool, which accepts the `True` python-requests sends."""
    value = request.query_params.get(name)
    if value is None:
        return False
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise queries.BadRequest(f'Failed to parse value of "{name}" ({value}) as a bool: invalid syntax')


def namespace_of(request: Request) -> str:
    return request.query_params.get("namespace") or "default"


async def read_body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw) if raw else None
    except ValueError as exc:
        raise queries.BadRequest(f"Request decode failed: {exc}") from exc


@dataclass(frozen=True)
class Replies:
    """Replies as Nomad writes them, for one cluster state and its ACL tokens."""

    state: ClusterState
    acl: Acl

    def reply(self, data: Any, table: str | tuple[str, ...] | None = None) -> JSONResponse:
        """`table`: a list answers with its table's index (the highest of its tables'), not the raft index
        (state.table_index)."""
        state = self.state
        tables = (table,) if isinstance(table, str) else table
        index = state.index if tables is None else max(1, *(state.table_index.get(t, 0) for t in tables))
        return JSONResponse(data, headers={"X-Nomad-Index": str(index), "X-Nomad-KnownLeader": "true",
                                           "X-Nomad-LastContact": "0"})

    def written(self, data: Any) -> JSONResponse:
        """A write's reply: only `X-Nomad-Index` (`setIndex` in `jobUpdate`, `jobDelete`, `allocStop`,
        command/agent/*_endpoint.go, v2.0.5), the reply's own `Index` where it has one."""
        index = data.get("Index") if isinstance(data, dict) else None
        return JSONResponse(data, headers={"X-Nomad-Index": str(index or self.state.index)})

    def visible(self, request: Request, items: list[Any], capability: str = "read-job") -> list[Any]:
        """A `namespace=*` list keeps the namespaces the token may read (acl.py)."""
        acl, state = self.acl, self.state
        if not acl.enabled or namespace_of(request) != "*":
            return items
        allowed = acl.readable(token_of(request), state.namespaces, capability)
        return [item for item in items if item.get("Namespace") in allowed]


def index_headers(index: int) -> dict[str, str]:
    return {"X-Nomad-Index": str(index), "X-Nomad-KnownLeader": "true", "X-Nomad-LastContact": "0"}


def http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    text = {404: "404 page not found", 405: "Invalid method"}.get(status, str(getattr(exc, "detail", exc)))
    return PlainTextResponse(text, status_code=status)
