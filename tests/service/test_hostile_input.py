"""Hostile requests at the API edge: a 4xx JSON answer, quickly, with nothing stored and no stall."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from nomad_gpu.render.loading import MAX_DEPTH
from nomad_gpu.service.config.settings import AccessSettings
from nomad_gpu.service.http.api import MAX_BODY, create_app
from nomad_gpu.service.loops.scheduler import SchedulerService

SPEC = "name: ok\ntask: {image: busybox}\n"




async def asgi_post(app: Any, chunks: Sequence[bytes], headers: Sequence[tuple[bytes, bytes]] = ()
                    ) -> tuple[int, dict[str, Any], int]:
    """POST /v1/jobs straight through ASGI: (status, JSON body, how many body chunks the app pulled)."""
    pending = list(chunks)
    pulled = 0

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        if not pending:
            return {"type": "http.disconnect"}
        pulled += 1
        chunk = pending.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/v1/jobs", "raw_path": b"/v1/jobs", "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/yaml"), *headers],
             "server": ("testserver", 80), "client": ("127.0.0.1", 5000)}
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(body), pulled


def test_a_declared_oversized_body_is_refused_before_it_is_read(service: SchedulerService) -> None:
    headers = [(b"content-length", str(10 * MAX_BODY).encode())]
    status, body, pulled = asyncio.run(asgi_post(create_app(service), [b"x" * 1024] * 4, headers))
    assert (status, pulled) == (413, 0)
    assert "larger than" in body["error"]


def test_a_chunked_body_is_cut_off_at_the_limit(service: SchedulerService) -> None:
    chunk = 64 * 1024
    status, body, pulled = asyncio.run(asgi_post(create_app(service), [b"#" * chunk] * 40))  # 2.5 MiB, no length
    assert status == 413
    assert pulled == MAX_BODY // chunk + 1  # the chunk that crossed the limit was the last one read
    assert service.store.list() == []


def test_a_body_at_the_limit_is_read(service: SchedulerService) -> None:
    text = (SPEC + "#" * MAX_BODY)[:MAX_BODY].encode()
    status, body, _ = asyncio.run(asgi_post(create_app(service), [text[:1000], text[1000:]]))
    assert status == 201, body


def test_a_bad_content_length_is_a_400(service: SchedulerService) -> None:
    status, body, _ = asyncio.run(asgi_post(create_app(service), [SPEC.encode()], [(b"content-length", b"-5")]))
    assert status == 400 and "Content-Length" in body["error"]


@pytest.mark.parametrize(("body", "ctype", "fragment"), [
    pytest.param(b"name: \xff\xfe\n", "application/yaml", "not UTF-8", id="invalid-utf8"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "application/json", f"nested deeper than {MAX_DEPTH}",
                 id="deep-json"),
    pytest.param(b"a: " + b"[" * 100_000 + b"]" * 100_000, "application/yaml", f"nested deeper than {MAX_DEPTH}",
                 id="deep-yaml"),
    pytest.param(b'{"name": "x", "name": "y"}', "application/json", "duplicate key 'name'", id="json-duplicate"),
    pytest.param(b"[1, 2]", "application/json", "must be a mapping", id="json-list"),
    pytest.param(b'{"name": "x", "priority": ' + b"9" * 5000 + b"}", "application/json", "invalid JSON",
                 id="json-huge-int"),
    pytest.param(b"name: x\ntask: {image: i}\npriority: " + b"9" * 5000 + b"\n", "application/yaml",
                 "invalid YAML", id="yaml-huge-int"),
])
def test_hostile_bodies_are_400_never_500(service: SchedulerService, body: bytes, ctype: str, fragment: str) -> None:
    client = TestClient(create_app(service))
    r = client.post("/v1/jobs", content=body, headers={"Content-Type": ctype})
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]
    assert service.store.list() == []


def test_an_alias_bomb_is_refused_at_its_line(service: SchedulerService) -> None:
    levels = ["a0: &a0 [lol]"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    body = "name: bomb\ntask: {image: busybox}\nmeta:\n" + "".join(f"  {line}\n" for line in levels)
    r = TestClient(create_app(service)).post("/v1/jobs", content=body)
    assert r.status_code == 400
    assert r.json()["error"] == "line 4, column 7: invalid YAML: anchors (&a0) are not allowed in a spec"
    assert service.store.list() == []


def sweep(values: int, params: int) -> str:
    parameters = ", ".join(f"p{i}: [{', '.join(str(v) for v in range(values))}]" for i in range(params))
    return f"kind: sweep\nname: s\ntask: {{image: i}}\nsweep: {{parameters: {{{parameters}}}}}\n"


def test_the_trial_cap_is_checked_before_the_sweep_reaches_the_scheduler(service: SchedulerService) -> None:
    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an over-cap sweep must not be expanded or stored")

    app = create_app(service, access=AccessSettings(max_trials=50))
    service.submit = never  # type: ignore[method-assign]
    r = TestClient(app).post("/v1/jobs", content=sweep(10, 2))
    assert r.status_code == 400
    assert r.json()["error"] == "line 4: sweep: the grid has 100 combinations, more than the limit of 50"


def test_the_default_trial_cap_is_ten_thousand(service: SchedulerService) -> None:
    r = TestClient(create_app(service)).post("/v1/jobs", content=sweep(10, 5))
    assert r.status_code == 400 and "more than the limit of 10000" in r.json()["error"]
    assert service.store.list() == []


def test_a_sweep_within_a_configured_cap_is_stored(service: SchedulerService) -> None:
    r = TestClient(create_app(service, access=AccessSettings(max_trials=9))).post("/v1/jobs", content=sweep(3, 2))
    assert r.status_code == 201 and len(r.json()["entries"]) == 9


def test_a_blocked_submission_does_not_stall_other_requests(service: SchedulerService) -> None:
    """A submit waiting on the scheduler (its lock, SQLite) runs in the thread pool, off the event loop."""
    entered, release, returned = threading.Event(), threading.Event(), threading.Event()
    real_submit = service.submit

    def slow_submit(data: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(2.0)  # bounded, so a regression fails instead of hanging
        returned.set()
        return real_submit(data, **kwargs)

    service.submit = slow_submit  # type: ignore[method-assign]
    app = create_app(service)

    async def scenario() -> tuple[bool, int, int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            post = asyncio.create_task(client.post("/v1/jobs", content=SPEC))
            await asyncio.to_thread(entered.wait, 5.0)
            listed = await client.get("/v1/jobs")
            served_while_blocked = not returned.is_set()
            release.set()
            return served_while_blocked, listed.status_code, (await post).status_code

    served_while_blocked, list_status, post_status = asyncio.run(scenario())
    assert (list_status, post_status) == (200, 201)
    assert served_while_blocked


def test_a_sweep_that_would_store_too_much_is_refused_before_expanding(service: SchedulerService) -> None:
    """A 50 KB spec times 2,000 trials would be about 100 MB of stored copies."""
    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a sweep over the storage bound must not reach the scheduler")

    service.submit = never  # type: ignore[method-assign]
    padding = "x" * 50_000
    text = sweep(2000, 1).replace("task: {image: i}", f"task: {{image: i, env: {{PAD: {padding}}}}}")
    r = TestClient(create_app(service)).post("/v1/jobs", content=text)
    assert r.status_code == 413
    assert r.json()["error"].startswith("the sweep would store 2000 copies of its")


@pytest.mark.parametrize("query", ["limit=" + "9" * 5000, "limit=-1", "limit=%D9%A3", "state=" + "x" * 10_000])
def test_hostile_query_parameters_are_400(service: SchedulerService, query: str) -> None:
    r = TestClient(create_app(service)).get(f"/v1/jobs?{query}")
    assert r.status_code == 400 and "error" in r.json()
