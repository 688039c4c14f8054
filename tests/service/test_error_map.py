"""The API's one exception-to-status map: each error of the tree has its status, whatever route raised it."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from nomad_gpu.domain.errors import (
    InvalidRequest,
    LedgerConflict,
    NotAllowed,
    StateConflict,
    TooLarge,
    Unavailable,
    UnknownEntry,
    UpstreamFailed,
)
from nomad_gpu.nomad.client import NomadNotFound, NomadUnavailable
from nomad_gpu.render import RenderError, SpecError
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.httpkit import status_of
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store.sqlite import StaleTransition

CASES = [
    pytest.param(UnknownEntry("no queue entry 'q9'"), 404, id="unknown-entry"),
    pytest.param(NomadNotFound("no such log"), 404, id="nomad-not-found"),
    pytest.param(NotAllowed("driver raw_exec"), 403, id="not-allowed"),
    pytest.param(StateConflict("q1 is running"), 409, id="state-conflict"),
    pytest.param(StaleTransition("moved meanwhile"), 409, id="stale-transition"),
    pytest.param(TooLarge("spec larger than 1 bytes"), 413, id="too-large"),
    pytest.param(InvalidRequest("bad"), 400, id="invalid-request"),
    pytest.param(SpecError("name: required"), 400, id="spec-error"),
    pytest.param(RenderError("undefined value"), 400, id="render-error"),
    pytest.param(Unavailable("no Nomad client"), 503, id="unavailable"),
    pytest.param(UpstreamFailed("cannot read"), 502, id="upstream"),
    pytest.param(NomadUnavailable("cannot reach Nomad"), 502, id="nomad-unreachable"),
]


@pytest.mark.parametrize(("exc", "status"), CASES)
def test_each_error_has_one_status(exc: Exception, status: int) -> None:
    assert status_of(exc) == status


def test_what_the_map_does_not_know_is_a_bug() -> None:
    assert status_of(LedgerConflict("double booking")) is None and status_of(KeyError("x")) is None


def test_spec_and_render_errors_are_in_the_tree_and_still_value_errors() -> None:
    for cls in (SpecError, RenderError):
        assert issubclass(cls, InvalidRequest) and issubclass(cls, ValueError)


@pytest.mark.parametrize(("exc", "status"), [*CASES, pytest.param(LedgerConflict("bug"), 500, id="bug")])
def test_the_app_answers_a_raised_error_with_its_status_and_one_line(service: SchedulerService, exc: Exception,
                                                                     status: int) -> None:
    async def boom(request: Request) -> Response:
        raise exc

    app = create_app(service)
    assert isinstance(app, Starlette)
    app.router.routes.insert(0, Route("/boom", boom))
    r = TestClient(app, raise_server_exceptions=False).get("/boom")
    assert r.status_code == status
    expected = str(exc) if status != 500 else "internal error (LedgerConflict); see the service log"
    assert r.json() == {"error": expected, "errors": [expected]}  # every refusal lists its messages

