"""The Nomad client edge: plain-text errors become our own error types; the event stream in both framings."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rawnomad import FRAMINGS, Conn, ScriptedNomad, alloc_event_frame

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.nomad.client import NomadClient, NomadNotFound, NomadRejected, NomadUnavailable
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.nomad.decode import decode_node
from nomad_gpu.nomad.framing import ndjson

pytestmark = pytest.mark.server  # a loopback server or the plugin as a subprocess, shared by the module

CLUSTER = Path(__file__).resolve().parents[2] / "clusters" / "mig-h100.yaml"


@pytest.fixture(scope="module")
def client() -> Iterator[NomadClient]:
    dc = DevCluster(CLUSTER)
    url = dc.start()
    yield NomadClient(NomadSettings(address=url))
    dc.stop()


def test_nodes_decode_with_mig_and_whole_gpus(client: NomadClient) -> None:
    (node,) = [decode_node(n) for n in client.nodes()]
    assert node.gpus and node.migs
    assert all(m.id.startswith("MIG-") and " MIG " in m.device_name for m in node.migs)


def test_parse_error_is_rejected_with_nomads_text(client: NomadClient) -> None:
    with pytest.raises(NomadRejected, match="Failed to parse job"):
        client.parse('job "x" { nonsense {')


def test_missing_objects(client: NomadClient) -> None:
    assert client.job("no-such-job") is None
    with pytest.raises(NomadNotFound, match="node not found"):
        client.node("0000")


def test_register_with_submission_round_trips(client: NomadClient) -> None:
    hcl = ('job "edge-test" {\n  type = "batch"\n  datacenters = ["dc1"]\n  group "g" {\n    task "t" {\n'
           '      driver = "docker"\n      config { image = "x" }\n    }\n  }\n}\n')
    job = client.parse(hcl)
    client.register(job, hcl)
    assert (client.job("edge-test") or {}).get("ID") == "edge-test"
    client.deregister("edge-test", purge=True)


def test_the_leader_read_is_the_outage_probe(client: NomadClient) -> None:
    assert client.leader()  # answers without a token: `/v1/status/leader` needs none


def test_unreachable_nomad_is_retryable() -> None:
    client = NomadClient(NomadSettings(address="http://127.0.0.1:9", timeout_s=1))
    with pytest.raises(NomadUnavailable) as info:
        client.nodes()
    assert info.value.retryable


# ---- the event stream, in the framing of each Nomad version ------------------------------------------------


def _consume(frames: Iterator[dict[str, Any]], into: list[dict[str, Any]], done: threading.Event) -> None:
    try:
        for frame in frames:
            into.append(frame)
    except NomadUnavailable:
        pass
    finally:
        done.set()


@pytest.mark.parametrize("framing", FRAMINGS)
def test_each_frame_is_handed_over_the_moment_its_line_arrives(framing: str) -> None:
    """Nomad 1.11.2+ ends the body only at close: a reader that waits for the end gets nothing.

    (`command/agent/event_endpoint.go`, v2.0.5, hijacked and close-delimited; v1.11.1, chunked.)
    """
    def script(conn: Conn, n: int) -> None:
        conn.head()
        conn.frame({})
        conn.frame(alloc_event_frame(7))
        nomad.release.wait(10)  # the connection stays open, as a healthy stream does
        conn.end()

    with ScriptedNomad(framing, script) as nomad:
        got: list[dict[str, Any]] = []
        done = threading.Event()
        client = NomadClient(NomadSettings(address=nomad.url))
        threading.Thread(target=_consume, args=(client.event_stream(0, ["Allocation:*"]), got, done),
                         daemon=True).start()
        deadline = time.monotonic() + 5
        while len(got) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not done.is_set(), "the stream must still be open"
        assert got == [{}, alloc_event_frame(7)]
        nomad.release.set()
        assert done.wait(5), "the end of the body ends the frames"


@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_stream_that_ends_ends_the_frames_without_error(framing: str) -> None:
    def script(conn: Conn, n: int) -> None:
        conn.head()
        conn.frame({})
        if framing != "hijacked":  # 1.11.1: a late error is written into the body, without a newline
            conn.write(b"subscription closed by server, client should resubscribe")
        conn.end()

    with ScriptedNomad(framing, script) as nomad:
        client = NomadClient(NomadSettings(address=nomad.url))
        assert list(client.event_stream(0, ["Allocation:*"])) == [{}]


def test_silence_longer_than_the_read_timeout_is_unavailable() -> None:
    """No byte at all (not even a heartbeat) within the read timeout: the stream is given up."""
    def script(conn: Conn, n: int) -> None:
        conn.head()
        conn.frame({})
        nomad.release.wait(10)

    with ScriptedNomad("hijacked", script) as nomad:
        client = NomadClient(NomadSettings(address=nomad.url))
        frames = client.event_stream(0, ["Allocation:*"], read_timeout_s=0.2)
        assert next(frames) == {}
        with pytest.raises(NomadUnavailable, match="no data"):
            next(frames)


@pytest.mark.parametrize(("status", "body", "verdict"), [
    pytest.param(403, "Permission denied", False, id="403-token-not-job"),
    pytest.param(500, "rpc error: No cluster leader", False, id="500-no-leader"),
    pytest.param(500, "raft apply failed: timed out enqueuing operation", False, id="500-raft"),
    pytest.param(500, "1 error occurred:\n\t* Task group main validation failed: bad", True, id="500-validation"),
    pytest.param(500, 'job "x" is in nonexistent namespace "ml"', True, id="500-namespace"),
    pytest.param(400, "Job ID hasn't been provided", True, id="400"),
])
def test_only_a_verdict_on_the_job_is_permanent(status: int, body: str, verdict: bool) -> None:
    """A 403, or a 500 that is not a job validation error, says nothing about the job (reference section 6)."""
    import http.server
    import threading

    from nomad_gpu.nomad.client import NomadError, NomadForbidden

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = NomadClient(NomadSettings(address=f"http://127.0.0.1:{server.server_port}", timeout_s=5))
        with pytest.raises(NomadError) as info:
            client.register({"ID": "x"}, "job x {}", create_only=True)
        assert info.value.retryable is not verdict, info.value
        assert isinstance(info.value, NomadForbidden) is (status == 403)
    finally:
        server.shutdown()


def test_stream_lines_split_however_the_reads_fall() -> None:
    body = b'{"Index": 1}\n\n{"Index": 2}\nnot json\n{}\n{"Index": 3, "Events": [{"Key": "a\\nb"}]}\n{"Ind'
    for size in (1, 3, 7, 64, len(body)):
        reads = [body[i:i + size] for i in range(0, len(body), size)]
        frames = list(ndjson(iter(reads)))
        assert frames == [{"Index": 1}, {"Index": 2}, {}, {"Index": 3, "Events": [{"Key": "a\nb"}]}], size


def test_the_proxy_for_nomad_is_read_from_the_environment_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from nomad_gpu.nomad.connection import environment_read_once

    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    session = environment_read_once("http://nomad.example:4646")
    assert session.proxies.get("http") == "http://proxy.example:3128" and session.trust_env is False
    monkeypatch.setenv("NO_PROXY", "nomad.example")
    assert environment_read_once("http://nomad.example:4646").proxies == {}
    monkeypatch.delenv("HTTP_PROXY")
    assert session.proxies.get("http") == "http://proxy.example:3128"  # read once: later changes are not seen
