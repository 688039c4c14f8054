"""The browser guard's rules as a pure function of the request (issue 31, item 9): no server.

A page can send a bodiless POST cross-site without a preflight (a CORS-safelisted method), so it must
carry `X-Nomad-Gpu-Client` or a token header; a DELETE (or any other method outside GET, HEAD and POST)
needs a preflight the service never grants, so it needs no such header, but a foreign `Origin` is still
refused."""

from __future__ import annotations

import pytest

from nomad_gpu.service.http.browser import BrowserGuard


async def _app(scope: object, receive: object, send: object) -> None:  # never called: refusal() is pure
    raise AssertionError("not reached")


GUARD = BrowserGuard(_app, frozenset())


def scope(method: str, *headers: tuple[str, str]) -> dict[str, object]:
    pairs = [("host", "127.0.0.1:4690"), *headers]
    return {"type": "http", "method": method, "headers": [(k.encode(), v.encode()) for k, v in pairs]}


@pytest.mark.parametrize(("method", "headers", "status"), [
    pytest.param("DELETE", (), None, id="delete-bare"),
    pytest.param("PUT", (), None, id="put-bare-needs-a-preflight-too"),
    pytest.param("PATCH", (), None, id="patch-bare"),
    pytest.param("POST", (), 403, id="post-bare"),
    pytest.param("post", (), 403, id="post-lower-case"),
    pytest.param("POST", (("x-nomad-gpu-client", "curl"),), None, id="post-with-header"),
    pytest.param("POST", (("authorization", "Bearer abc"),), None, id="post-with-token"),
    pytest.param("DELETE", (("origin", "http://evil.example"),), 403, id="delete-foreign-origin"),
    pytest.param("DELETE", (("origin", "null"),), 403, id="delete-opaque-origin"),
    pytest.param("DELETE", (("origin", "http://localhost:4690"),), None, id="delete-own-origin"),
    pytest.param("OPTIONS", (("origin", "https://evil.example"), ("access-control-request-method", "DELETE")),
                 403, id="preflight-foreign"),
    pytest.param("GET", (), None, id="get"),
])
def test_which_requests_the_guard_refuses(method: str, headers: tuple[tuple[str, str], ...],
                                          status: int | None) -> None:
    refusal = GUARD.refusal(scope(method, *headers))
    assert (refusal[0] if refusal else None) == status, refusal


def test_the_post_refusal_names_the_header() -> None:
    refusal = GUARD.refusal(scope("POST"))
    assert refusal is not None and "X-Nomad-Gpu-Client" in refusal[1]
