"""`GET /v1/usage?since=` with a time that is no time (issue 31, items 5 and 8): `nan`, `inf`, `-inf` and
`1e309` answered 500 with a traceback in the log every time, and a negative `since`, or one after
`until`, answered 200. All are 400 with one line, and nothing is logged with a traceback."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from nomad_gpu.service.accounting.report import parse_since
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.listen import ApiServer, plan_listen
from nomad_gpu.service.loops.scheduler import SchedulerService

NOW = 1_800_000_000.0
BAD = ["nan", "NaN", "inf", "-inf", "1e309", "-1e309", "infd", "nanh", "1e308d", "-5", "-1e10",
       str(NOW + 3600), "-0.5h"]


@pytest.mark.parametrize("text", BAD)
def test_parse_since_refuses_what_is_no_time_before_now(text: str) -> None:
    with pytest.raises(ValueError, match="since"):
        parse_since(text, NOW)


@pytest.mark.parametrize(("text", "expected"), [("30d", NOW - 30 * 86400), ("0", NOW), ("3600", NOW - 3600),
                                                ("1700000000", 1_700_000_000.0), (str(NOW), NOW)])
def test_parse_since_keeps_what_it_took(text: str, expected: float) -> None:
    assert parse_since(text, NOW) == expected


@pytest.mark.parametrize("text", BAD[:8] + ["-5", "4000000000"])
def test_usage_with_a_bad_since_is_400_without_a_traceback(service: SchedulerService, text: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    client = TestClient(create_app(service), raise_server_exceptions=False)
    r = client.get("/v1/usage", params={"since": text})
    assert r.status_code == 400, r.text
    assert "since" in r.json()["error"] and "\n" not in r.json()["error"]
    assert not [rec for rec in caplog.records if rec.exc_info]


@pytest.fixture
def port(service: SchedulerService) -> Iterator[int]:
    server = ApiServer(create_app(service), plan_listen("http://127.0.0.1:0", token_required=False))
    address = server.serve()
    yield int(address.rsplit(":", 1)[1])
    server.stop()


@pytest.mark.server
def test_bad_times_over_a_socket_are_400_and_log_no_traceback(port: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    for text in ("nan", "inf", "-inf", "1e309", "-5", "4000000000"):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/usage?since={text}", timeout=10) as r:
                code, body = r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            code, body = exc.code, json.loads(exc.read())
        assert code == 400 and "since" in body["error"], (text, code, body)
    for path in ("/v1/jobs?limit=nan", "/v1/jobs?offset=-1", "/v1/jobs?limit=1e309",
                 "/v1/jobs/q000001/logs?offset=inf"):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                code = r.status
        except urllib.error.HTTPError as exc:
            code = exc.code
        assert 400 <= code < 500, (path, code)
    assert not [rec.getMessage() for rec in caplog.records if rec.exc_info]


@pytest.mark.server
def test_a_bug_is_logged_once_by_the_service_not_again_by_the_server(
        service: SchedulerService, port: int, caplog: pytest.LogCaptureFixture) -> None:
    """A 500 was logged twice: by the service, and again by uvicorn through its own handler, which the log
    limiter does not see. One record, from the service's logger."""
    caplog.set_level(logging.INFO)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    service.store.list = broken  # type: ignore[method-assign, assignment]
    for _ in range(3):
        with pytest.raises(urllib.error.HTTPError) as got:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/jobs", timeout=10)
        assert got.value.code == 500 and "RuntimeError" in json.loads(got.value.read())["error"]
    tracebacks = [rec.name for rec in caplog.records if rec.exc_info]
    assert tracebacks == ["nomad_gpu.service.http.httpkit"] * 3
