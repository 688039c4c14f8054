"""The Nomad token never follows a redirect (issue 26, item 7): requests strips `Authorization` on a
redirect to another host, not `X-Nomad-Token`, so a Nomad address answering 307 handed the token to
wherever it pointed. Two loopback servers: the one redirected to must see no request at all."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from nomad_gpu.nomad.client import NomadClient, NomadError
from nomad_gpu.nomad.connection import NomadSettings

pytestmark = pytest.mark.server


class Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []
    location = ""

    def _answer(self) -> None:
        type(self).seen.append(dict(self.headers))
        if self.location:
            self.send_response(307)
            self.send_header("Location", self.location + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b"[]"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Nomad-Index", "1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, *args: object) -> None:
        pass


def serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def redirected() -> Iterator[tuple[str, list[dict[str, str]]]]:
    class Elsewhere(Recorder):
        seen: list[dict[str, str]] = []

    other, other_url = serve(Elsewhere)

    class Nomad(Recorder):
        seen: list[dict[str, str]] = []
        location = other_url

    nomad, nomad_url = serve(Nomad)
    yield nomad_url, Elsewhere.seen
    nomad.shutdown()
    other.shutdown()


def test_a_redirect_is_an_error_and_the_token_goes_nowhere(redirected: tuple[str, list[dict[str, str]]]) -> None:
    address, elsewhere = redirected
    client = NomadClient(NomadSettings(address=address, token="secret-token-0123456789", timeout_s=5))
    for call in (client.nodes, client.leader, lambda: next(iter(client.event_stream(0, ["Allocation"])))):
        with pytest.raises(NomadError, match="redirect"):
            call()
    assert elsewhere == []
