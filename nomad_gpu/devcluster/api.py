"""The dev cluster's HTTP app: the Nomad API subset the service uses, plus `/_dev/` endpoints.

Error conventions follow reference section 9: bare `text/plain` messages, never JSON; 400 for bad
parameters or bodies, 404 `... not found`, 405 `Invalid method`, 500 for jobspec validation.
Boolean query parameters use Go's ParseBool, which accepts the `True` python-requests sends.
Blocking queries are not supported: `index`/`wait` are accepted and answered at once (a reply
never guarantees a change anyway, reference section 2).

Every handler's work (reads, writes, HCL parsing, JSON encoding) runs in the thread pool (plain
`def` endpoints are run there by Starlette), so the event loop only feeds the event streams and a
large listing never delays a frame. Parse and register on the loop would save about 0.3 ms of CPU a
request, but a register's frames then leave after its reply instead of before it, and the service
registered about a sixth fewer jobs a second in the scale benchmark (docs/benchmarks.md).

This module only assembles the app: the routes live in one module per group, each a function of its
explicit dependencies (`noderoutes.py`, `jobroutes.py`, `allocroutes.py`, `clusterroutes.py`,
`varroutes.py`, `devroutes.py`; what they share is `apikit.py`), and the gates that run before every
route are middleware (faults.py, election.py, acl.py).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from . import namespaces as namespace_ops
from . import queries
from .acl import Acl, AclGate
from .allocroutes import alloc_routes, evaluation_routes
from .apikit import Replies, http_error
from .clusterroutes import namespace_routes, service_routes, system_routes
from .devroutes import dev_routes
from .election import RPC_HOLD_S, LeaderGate
from .events import EventBroker
from .faults import FaultGate
from .hcl import HclError
from .jobroutes import job_routes
from .jobs import JobRequestError, JobValidationError
from .noderoutes import node_routes
from .records import NotFound
from .register import RegisterConflict
from .state import ClusterState
from .stream import EventStreamEndpoint
from .variables import Identities, VariableStore
from .varroutes import variable_routes
from .version import DEFAULT_NOMAD_VERSION, NomadVersion
from .writelog import WriteRecorder, log_of

logger = logging.getLogger(__name__)


def build_app(state: ClusterState, broker: EventBroker, *, heartbeat_s: float = 30.0,
              nomad_version: NomadVersion | None = None, acl: Acl | None = None,
              rpc_hold_s: float = RPC_HOLD_S) -> Starlette:
    version = nomad_version or NomadVersion.parse(DEFAULT_NOMAD_VERSION)
    acl = acl or Acl()
    # The state plays the same release as the HTTP layer (drain and migration rules differ by version).
    state.nomad_version = version
    replies = Replies(state, acl)

    routes = [
        *node_routes(state, replies),
        *job_routes(state, replies, version),
        *evaluation_routes(state, replies),
        *alloc_routes(state, replies),
        Route("/v1/event/stream", EventStreamEndpoint(broker, heartbeat_s, version,
                                                      functools.partial(namespace_ops.expand, state), acl),
              methods=["GET"]),
        *system_routes(state, replies, version),
        *namespace_routes(state, replies, acl),
        *service_routes(state, replies),
        *variable_routes(VariableStore(state.advance_index), Identities(), acl, state.allocs.get),
        *dev_routes(state, broker),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Response]] = {
        NotFound: lambda _, exc: PlainTextResponse(str(exc.args[0]), status_code=404),
        queries.BadRequest: lambda _, exc: PlainTextResponse(str(exc), status_code=400),
        JobRequestError: lambda _, exc: PlainTextResponse(str(exc), status_code=400),
        HclError: lambda _, exc: PlainTextResponse(f"Failed to parse job: {exc}", status_code=400),
        JobValidationError: lambda _, exc: PlainTextResponse(str(exc), status_code=500),
        RegisterConflict: lambda _, exc: PlainTextResponse(str(exc), status_code=500),
        HTTPException: http_error,
    }
    def alloc_namespace(alloc_id: str) -> str | None:
        alloc = state.allocs.get(alloc_id)
        return alloc.namespace if alloc is not None else None

    return Starlette(routes=routes, exception_handlers=handlers,
                     middleware=[Middleware(FaultGate, faults=state.faults),
                                 Middleware(LeaderGate, election=state.election, hold_s=rpc_hold_s),
                                 Middleware(AclGate, acl=acl, alloc_namespace=alloc_namespace),
                                 Middleware(WriteRecorder, log=log_of(state))])
