"""A 200 from Nomad with the wrong shape is a Nomad error (issue 26, item 9), never a register taken as done
(the entry then waited out the 5-minute admission deadline with nothing in Nomad) nor a TypeError. One
loopback server answers every call with the reply under test."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from nomad_gpu.nomad.client import NomadClient, NomadError
from nomad_gpu.nomad.connection import NomadSettings

pytestmark = pytest.mark.server


class Canned(BaseHTTPRequestHandler):
    reply: Any = None

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = json.dumps(type(self).reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def nomad() -> Iterator[tuple[NomadClient, type[Canned]]]:
    class Handler(Canned):
        pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield NomadClient(NomadSettings(address=f"http://127.0.0.1:{server.server_address[1]}", timeout_s=5)), Handler
    server.shutdown()


@pytest.mark.parametrize("reply", [
    pytest.param({}, id="empty-object"),
    pytest.param({"EvalID": 5, "JobModifyIndex": 12}, id="eval-id-a-number"),
    pytest.param({"EvalID": "e1", "JobModifyIndex": "12"}, id="index-a-string"),
    pytest.param([], id="a-list"),
    pytest.param("ok", id="a-string"),
    pytest.param(None, id="null"),
])
def test_a_malformed_register_reply_is_a_nomad_error(nomad: tuple[NomadClient, type[Canned]], reply: Any) -> None:
    client, handler = nomad
    handler.reply = reply
    with pytest.raises(NomadError, match="malformed"):
        client.register({"ID": "j"}, "hcl", create_only=True)


def test_a_well_formed_register_reply_passes(nomad: tuple[NomadClient, type[Canned]]) -> None:
    client, handler = nomad
    handler.reply = {"EvalID": "e1", "EvalCreateIndex": 12, "JobModifyIndex": 12, "Warnings": ""}
    assert client.register({"ID": "j"}, "hcl", create_only=True)["EvalID"] == "e1"


@pytest.mark.parametrize(("call", "reply"), [
    pytest.param("parse", ["not", "a", "job"], id="parse-a-list"),
    pytest.param("parse", {"Name": "no ID"}, id="parse-without-id"),
    pytest.param("nodes", {"a": 1}, id="nodes-an-object"),
    pytest.param("nodes", [1, 2], id="nodes-of-numbers"),
    pytest.param("allocations", [["x"]], id="allocations-of-lists"),
    pytest.param("job", [1], id="job-a-list"),
])
def test_other_malformed_replies_are_nomad_errors(nomad: tuple[NomadClient, type[Canned]], call: str,
                                                  reply: Any) -> None:
    client, handler = nomad
    handler.reply = reply
    args = {"parse": ("job {}",), "job": ("j",)}.get(call, ())
    with pytest.raises(NomadError, match="malformed"):
        getattr(client, call)(*args)
