"""The dev cluster's own `/_dev/` endpoints, which Nomad has not: the audit, a GC pass, and the faults tests
and the chaos run inject (unreachable, lost replies, dropped streams, nodes down, drained or cut off, elections).

One module per group of routes, each a function of what it reads (apikit.py says why). A new fault's
route goes here, beside the others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import devicehealth, gc, partitions, queries
from .apikit import Endpoint
from .events import EventBroker
from .state import ClusterState


def dev_routes(state: ClusterState, broker: EventBroker) -> list[Route]:
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

    return [
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
        *partitions.routes(state),
    ]
