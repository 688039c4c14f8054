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
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from . import devicehealth, gc, logs, queries, services, usage
from . import namespaces as namespace_ops
from .acl import TOKEN_NOT_FOUND, Acl, AclGate, TokenNotFound, token_of
from .election import RPC_HOLD_S, LeaderGate
from .events import EventBroker
from .faults import FaultGate
from .hcl import HclError, parse_job_hcl
from .jobs import JobRequestError, JobValidationError, canonicalize
from .maxrun import has_max_run_duration
from .records import NotFound
from .register import RegisterConflict, check_register_body, register_namespace, register_options
from .state import ClusterState
from .stream import EventStreamEndpoint
from .variables import Identities, VariableStore
from .varroutes import variable_routes
from .version import DEFAULT_NOMAD_VERSION, NomadVersion

logger = logging.getLogger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name)
    if value is None:
        return False
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise queries.BadRequest(f'Failed to parse value of "{name}" ({value}) as a bool: invalid syntax')


def _namespace(request: Request) -> str:
    return request.query_params.get("namespace") or "default"


async def _body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw) if raw else None
    except ValueError as exc:
        raise queries.BadRequest(f"Request decode failed: {exc}") from exc


def build_app(state: ClusterState, broker: EventBroker, *, heartbeat_s: float = 30.0,
              nomad_version: NomadVersion | None = None, acl: Acl | None = None,
              rpc_hold_s: float = RPC_HOLD_S) -> Starlette:
    version = nomad_version or NomadVersion.parse(DEFAULT_NOMAD_VERSION)
    acl = acl or Acl()
    # The state plays the same release as the HTTP layer (drain and migration rules differ by version).
    state.nomad_version = version

    def reply(data: Any, table: str | tuple[str, ...] | None = None) -> JSONResponse:
        """`table`: a list answers with its table's index (the highest of its tables'), not the raft index
        (state.table_index)."""
        tables = (table,) if isinstance(table, str) else table
        index = state.index if tables is None else max(1, *(state.table_index.get(t, 0) for t in tables))
        return JSONResponse(data, headers={"X-Nomad-Index": str(index), "X-Nomad-KnownLeader": "true",
                                           "X-Nomad-LastContact": "0"})

    def written(data: Any) -> JSONResponse:
        """A write's reply: only `X-Nomad-Index` (`setIndex` in `jobUpdate`, `jobDelete`, `allocStop`,
        command/agent/*_endpoint.go, v2.0.5), the reply's own `Index` where it has one."""
        index = data.get("Index") if isinstance(data, dict) else None
        return JSONResponse(data, headers={"X-Nomad-Index": str(index or state.index)})

    def visible(request: Request, items: list[Any], capability: str = "read-job") -> list[Any]:
        """A `namespace=*` list keeps the namespaces the token may read (acl.py)."""
        if not acl.enabled or _namespace(request) != "*":
            return items
        allowed = acl.readable(token_of(request), state.namespaces, capability)
        return [item for item in items if item.get("Namespace") in allowed]

    # -- nodes -------------------------------------------------------------------------------------

    def nodes(request: Request) -> Response:
        q = request.query_params
        return reply(queries.list_nodes(state, prefix=q.get("prefix", ""), resources=_flag(request, "resources"),
                                        os_attr=_flag(request, "os"), filter_expr=q.get("filter", "")), "nodes")

    def node(request: Request) -> Response:
        return reply(queries.get_node(state, request.path_params["node_id"]))

    def node_allocations(request: Request) -> Response:
        return reply(queries.node_allocations(state, request.path_params["node_id"]))

    # -- jobs --------------------------------------------------------------------------------------

    async def jobs(request: Request) -> Response:
        if request.method == "GET":
            q = request.query_params  # `Job.List` answers max(jobs, job_summary) (nomad/job_endpoint.go, v2.0.5)
            return await run_in_threadpool(lambda: reply(visible(request, queries.list_jobs(
                state, namespace=_namespace(request), prefix=q.get("prefix", ""), with_meta=_flag(request, "meta"),
                filter_expr=q.get("filter", "")), "list-jobs"), ("jobs", "job_summary")))
        body = await _body(request)
        job, submission = check_register_body(body)
        options = register_options(body)
        namespace = register_namespace(request.query_params.get("namespace"), options, job)
        return written(await run_in_threadpool(state.register, job, submission, namespace, options))

    async def parse(request: Request) -> Response:
        body = await _body(request)
        text = body.get("JobHCL") if isinstance(body, dict) else None
        if not isinstance(text, str) or not text.strip():
            return PlainTextResponse("Job spec is empty", status_code=400)
        job = await run_in_threadpool(functools.partial(parse_job_hcl, text,
                                                        max_run_duration=has_max_run_duration(version)))
        return reply(canonicalize(job) if body.get("Canonicalize") else job)

    async def job(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        if request.method == "GET":
            return await run_in_threadpool(lambda: reply(queries.get_job(state, _namespace(request), job_id)))
        if request.method == "DELETE":
            return written(await run_in_threadpool(state.deregister, _namespace(request), job_id,
                                                 _flag(request, "purge")))
        body = await _body(request)
        job_json, submission = check_register_body(body)
        if job_json["ID"] != job_id:
            raise JobRequestError("Job ID does not match name")
        options = register_options(body)
        namespace = register_namespace(request.query_params.get("namespace"), options, job_json)
        return written(await run_in_threadpool(state.register, job_json, submission, namespace, options))

    def job_submission(request: Request) -> Response:
        return reply(queries.job_submission(state, _namespace(request), request.path_params["job_id"],
                                            request.query_params.get("version")))

    def job_allocations(request: Request) -> Response:
        return reply(queries.job_allocations(state, _namespace(request), request.path_params["job_id"],
                                             all_versions=_flag(request, "all")))

    def job_evaluations(request: Request) -> Response:
        return reply(queries.job_evaluations(state, _namespace(request), request.path_params["job_id"]))

    def evaluations(request: Request) -> Response:
        q = request.query_params
        return reply(visible(request, queries.list_evaluations(state, namespace=_namespace(request),
                                                               prefix=q.get("prefix", ""),
                                                               filter_expr=q.get("filter", ""))), "evals")

    def evaluation(request: Request) -> Response:
        return reply(queries.get_evaluation(state, request.path_params["eval_id"]))

    def system_gc(request: Request) -> Response:
        """`PUT /v1/system/gc`: enqueues a forced GC and answers 200 with no body before it runs
        (`command/agent/system_endpoint.go`, `nomad/system_endpoint.go`, v2.0.5)."""
        state.timers.call_soon(lambda: gc.force(state))
        return Response(status_code=200, headers={"X-Nomad-Index": str(state.index)})

    def job_summary(request: Request) -> Response:
        return reply(queries.job_summary(state, _namespace(request), request.path_params["job_id"]))

    # -- allocations -------------------------------------------------------------------------------

    def allocations(request: Request) -> Response:
        q = request.query_params
        task_states = q.get("task_states") is None or _flag(request, "task_states")
        return reply(visible(request, queries.list_allocations(
            state, namespace=_namespace(request), prefix=q.get("prefix", ""), resources=_flag(request, "resources"),
            task_states=task_states, filter_expr=q.get("filter", ""))), "allocs")

    def allocation(request: Request) -> Response:
        return reply(queries.get_allocation(state, request.path_params["alloc_id"]))

    def allocation_stats(request: Request) -> Response:
        """`GET /v1/client/allocation/:id/stats` (usage.py)."""
        return reply(usage.alloc_stats(state, request.path_params["alloc_id"], request.query_params.get("task", "")))

    async def stop_allocation(request: Request) -> Response:
        return written(await run_in_threadpool(state.stop_alloc, request.path_params["alloc_id"]))

    # -- the native service catalogue (services.py) ------------------------------------------------

    def service_list(request: Request) -> Response:
        return reply(visible(request, services.listing(state, _namespace(request))), "service_registrations")

    def service(request: Request) -> Response:
        name = request.path_params.get("name", "")
        if not name:  # `/v1/service/` (command/agent/service_registration_endpoint.go, v2.0.5)
            raise queries.BadRequest("missing service name")
        return reply(visible(request, services.by_name(state, _namespace(request), name)), "service_registrations")

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
        return JSONResponse(listing, headers=_index_headers(state.namespace_index))

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
                body = await _body(request)
                index = await run_in_threadpool(namespace_ops.upsert, state, name, body)
        except namespace_ops.NamespaceError as exc:
            return PlainTextResponse(str(exc), status_code=exc.status)
        return JSONResponse(None, headers={"X-Nomad-Index": str(index)})  # `setIndex`, as namespaceUpdate does

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

    # -- /_dev -------------------------------------------------------------------------------------

    def audit(request: Request) -> Response:
        return JSONResponse(queries.audit(state))

    def dev_gc(request: Request) -> Response:
        threshold = request.query_params.get("threshold_s", "0")
        try:
            threshold_s = float(threshold)
        except ValueError:
            raise queries.BadRequest(f"threshold_s {threshold!r} is not a number") from None
        return JSONResponse(gc.collect(state, threshold_s))

    def _number(request: Request, name: str, default: str) -> float:
        text = request.query_params.get(name, default)
        try:
            return float(text)
        except ValueError:
            raise queries.BadRequest(f"{name} {text!r} is not a number") from None

    def unreachable(request: Request) -> Response:
        state.faults.unreachable(_number(request, "seconds", "0"))
        dropped = broker.drop_all()
        return JSONResponse({**state.faults.snapshot(), "streams_dropped": dropped})

    def reachable(request: Request) -> Response:
        state.faults.reachable()
        return JSONResponse(state.faults.snapshot())

    def lose_replies(request: Request) -> Response:
        try:
            state.faults.lose_replies(int(_number(request, "count", "1")), request.query_params.get("mode", "reset"),
                                      _number(request, "delay_s", "0"))
        except ValueError as exc:
            raise queries.BadRequest(str(exc)) from None
        return JSONResponse(state.faults.snapshot())

    async def drop_streams(request: Request) -> Response:
        return JSONResponse({"dropped": broker.drop_all()})

    def node_fault(action: Callable[[str], Any]) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            node_json = await run_in_threadpool(lambda: action(request.path_params["node_id"]).to_json())
            return JSONResponse({"ID": node_json["ID"], "Status": node_json["Status"],
                                 "SchedulingEligibility": node_json["SchedulingEligibility"],
                                 "Drain": node_json["Drain"]})
        return endpoint

    def election(request: Request) -> Response:
        """`POST /_dev/election?seconds=N`: no leader for N seconds of the cluster's clock (no `seconds`:
        until `POST /_dev/election/end`); election.py says what the API answers meanwhile."""
        seconds = _number(request, "seconds", "0") if "seconds" in request.query_params else None
        try:
            state.election.begin(seconds)
        except ValueError as exc:
            raise queries.BadRequest(str(exc)) from None
        return JSONResponse(state.election.snapshot())

    def election_end(request: Request) -> Response:
        state.election.end()
        return JSONResponse(state.election.snapshot())

    routes = [
        Route("/v1/nodes", nodes, methods=["GET"]),
        Route("/v1/node/{node_id}", node, methods=["GET"]),
        Route("/v1/node/{node_id}/allocations", node_allocations, methods=["GET"]),
        Route("/v1/jobs", jobs, methods=["GET", "POST", "PUT"]),
        Route("/v1/jobs/parse", parse, methods=["POST", "PUT"]),
        Route("/v1/job/{job_id}", job, methods=["GET", "POST", "PUT", "DELETE"]),
        Route("/v1/job/{job_id}/submission", job_submission, methods=["GET"]),
        Route("/v1/job/{job_id}/allocations", job_allocations, methods=["GET"]),
        Route("/v1/job/{job_id}/summary", job_summary, methods=["GET"]),
        Route("/v1/job/{job_id}/evaluations", job_evaluations, methods=["GET"]),
        Route("/v1/evaluations", evaluations, methods=["GET"]),
        Route("/v1/evaluation/{eval_id}", evaluation, methods=["GET"]),
        Route("/v1/system/gc", system_gc, methods=["PUT"]),
        Route("/v1/allocations", allocations, methods=["GET"]),
        Route("/v1/allocation/{alloc_id}", allocation, methods=["GET"]),
        Route("/v1/allocation/{alloc_id}/stop", stop_allocation, methods=["POST", "PUT"]),
        Route("/v1/client/allocation/{alloc_id}/stats", allocation_stats, methods=["GET"]),
        Route("/v1/client/fs/logs/{alloc_id}", functools.partial(logs.fs_logs, state), methods=["GET"]),
        Route("/v1/event/stream", EventStreamEndpoint(broker, heartbeat_s, version,
                                                      functools.partial(namespace_ops.expand, state), acl),
              methods=["GET"]),
        Route("/v1/status/leader", leader, methods=["GET"]),
        Route("/v1/agent/members", agent_members, methods=["GET"]),
        Route("/v1/namespaces", namespaces, methods=["GET"]),
        Route("/v1/services", service_list, methods=["GET"]),
        Route("/v1/service/{name}", service, methods=["GET"]),
        Route("/v1/service/", service, methods=["GET"]),
        Route("/v1/namespace/{name}", namespace, methods=["GET", "POST", "PUT", "DELETE"]),
        *variable_routes(VariableStore(state.advance_index), Identities(), acl, state.allocs.get),
        Route("/_dev/audit", audit, methods=["GET"]),
        Route("/_dev/streams/drop", drop_streams, methods=["POST"]),
        Route("/_dev/gc", dev_gc, methods=["POST"]),
        Route("/_dev/unreachable", unreachable, methods=["POST"]),
        Route("/_dev/reachable", reachable, methods=["POST"]),
        Route("/_dev/lose-replies", lose_replies, methods=["POST"]),
        Route("/_dev/node/{node_id}/down", node_fault(lambda n: state.set_node_status(n, "down")), methods=["POST"]),
        Route("/_dev/node/{node_id}/up", node_fault(lambda n: state.set_node_status(n, "ready")), methods=["POST"]),
        Route("/_dev/node/{node_id}/drain", node_fault(lambda n: state.set_drain(n, True)), methods=["POST"]),
        Route("/_dev/node/{node_id}/undrain", node_fault(lambda n: state.set_drain(n, False)), methods=["POST"]),
        Route("/_dev/node/{node_id}/eligible", node_fault(lambda n: state.set_eligibility(n, True)),
              methods=["POST"]),
        Route("/_dev/node/{node_id}/ineligible", node_fault(lambda n: state.set_eligibility(n, False)),
              methods=["POST"]),
        *devicehealth.routes(state),
        Route("/_dev/election", election, methods=["POST"]),
        Route("/_dev/election/end", election_end, methods=["POST"]),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Response]] = {
        NotFound: lambda _, exc: PlainTextResponse(str(exc.args[0]), status_code=404),
        queries.BadRequest: lambda _, exc: PlainTextResponse(str(exc), status_code=400),
        JobRequestError: lambda _, exc: PlainTextResponse(str(exc), status_code=400),
        HclError: lambda _, exc: PlainTextResponse(f"Failed to parse job: {exc}", status_code=400),
        JobValidationError: lambda _, exc: PlainTextResponse(str(exc), status_code=500),
        RegisterConflict: lambda _, exc: PlainTextResponse(str(exc), status_code=500),
        HTTPException: _http_error,
    }
    def alloc_namespace(alloc_id: str) -> str | None:
        alloc = state.allocs.get(alloc_id)
        return alloc.namespace if alloc is not None else None

    return Starlette(routes=routes, exception_handlers=handlers,
                     middleware=[Middleware(FaultGate, faults=state.faults),
                                 Middleware(LeaderGate, election=state.election, hold_s=rpc_hold_s),
                                 Middleware(AclGate, acl=acl, alloc_namespace=alloc_namespace)])


def _index_headers(index: int) -> dict[str, str]:
    return {"X-Nomad-Index": str(index), "X-Nomad-KnownLeader": "true", "X-Nomad-LastContact": "0"}


def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    text = {404: "404 page not found", 405: "Invalid method"}.get(status, str(getattr(exc, "detail", exc)))
    return PlainTextResponse(text, status_code=status)
