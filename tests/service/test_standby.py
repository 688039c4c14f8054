"""A standby replica's API (service/ha/standby.py): its own status and metrics; every other request forwarded to
the leader with its method, path, query, body and headers, the answer passed back; 503 with Retry-After while
nobody leads or the leader does not answer; the token gate before anything is forwarded."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.config.settings import AccessSettings
from nomad_gpu.service.ha.standby import standby_app
from nomad_gpu.service.http.listen import ApiServer, plan_listen

pytestmark = pytest.mark.server
TOKEN = "vision-token-0123456789abcdef"
ACCESS = AccessSettings(tokens={TOKEN: "vision"})
HA = {"role": "standby", "epoch": 4, "leader": ""}


@pytest.fixture
def leader() -> Iterator[str]:
    """A stand-in for the leader's API over real loopback HTTP: it echoes what reached it."""

    async def echo(request: Request) -> Response:
        body = await request.body()
        return JSONResponse({"method": request.method, "path": request.url.path, "query": request.url.query,
                             "body": body.decode(), "authorization": request.headers.get("authorization"),
                             "key": request.headers.get("idempotency-key"),
                             "type": request.headers.get("content-type")}, status_code=201,
                            headers={"X-From": "leader"})

    server = ApiServer(Starlette(routes=[Route("/{path:path}", echo, methods=["GET", "POST", "DELETE"])]),
                       plan_listen("http://127.0.0.1:0", token_required=False))
    address = server.serve()
    yield address
    server.stop()


def test_a_standby_forwards_to_the_leader_with_the_callers_request(leader: str) -> None:
    client = TestClient(standby_app(lambda: leader, lambda: {**HA, "leader": leader}, Metrics(), ACCESS))
    r = client.post("/v1/jobs?dry=1", content="name: a\n",
                    headers={"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": "k1",
                             "Content-Type": "application/yaml"})
    assert r.status_code == 201 and r.headers["X-From"] == "leader"
    assert r.json() == {"method": "POST", "path": "/v1/jobs", "query": "dry=1", "body": "name: a\n",
                        "authorization": f"Bearer {TOKEN}", "key": "k1", "type": "application/yaml"}
    status = client.get("/v1/status", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert status["role"] == "standby" and status["epoch"] == 4 and status["leader"] == leader
    assert status["ready"] is False  # a standby acts on nothing


def test_without_a_leader_the_answer_is_503_with_retry_after(leader: str) -> None:
    with socket.socket() as s:  # a port nothing listens on: a leader that died
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    for where, said in (("", "no replica leads"), (dead, "the leader does not answer")):
        client = TestClient(standby_app(lambda w=where: w, lambda: HA, Metrics(), ACCESS))  # type: ignore[misc]
        r = client.delete("/v1/jobs/q000001", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 503 and r.headers.get("Retry-After") and said in r.json()["error"], r.text


def test_the_token_gate_comes_before_forwarding(leader: str) -> None:
    client = TestClient(standby_app(lambda: leader, lambda: HA, Metrics(), ACCESS), base_url="http://10.0.0.9")
    r = client.post("/v1/jobs", content="name: a\n", headers={"Content-Type": "application/yaml"})  # no token
    assert r.status_code in (401, 403), r.text
    assert "X-From" not in r.headers
