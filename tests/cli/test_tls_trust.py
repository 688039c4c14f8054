"""A certificate the client does not trust is named as such, with the variable that fixes it: the CLI's
NOMAD_GPU_CACERT for the service, NOMAD_CACERT for Nomad (issue: a bare `SSLError` told nobody what to do)."""

from __future__ import annotations

import http.server
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from nomad_gpu.cli.main import main
from nomad_gpu.nomad.client import unreachable

pytestmark = pytest.mark.server


class _Jobs(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        body = json.dumps({"entries": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTPS server on loopback with a self-signed certificate for 127.0.0.1; yields its URL and the
    certificate (its own CA)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Jobs)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", cert
    finally:
        server.shutdown()
        server.server_close()


def test_an_untrusted_service_certificate_names_nomad_gpu_cacert(tls_server: tuple[str, Path]) -> None:
    url, _ = tls_server
    result = CliRunner().invoke(main, ["queue"], env={"NOMAD_GPU_ADDR": url, "NOMAD_GPU_CACERT": ""})
    assert result.exit_code == 1
    line = result.stderr.strip()
    assert "certificate not trusted: set NOMAD_GPU_CACERT" in line and url in line and "\n" not in line


def test_nomad_gpu_cacert_makes_the_service_trusted(tls_server: tuple[str, Path]) -> None:
    url, cert = tls_server
    result = CliRunner().invoke(main, ["queue", "--json"], env={"NOMAD_GPU_ADDR": url, "NOMAD_GPU_CACERT": str(cert)})
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_an_untrusted_nomad_certificate_names_nomad_cacert(tls_server: tuple[str, Path]) -> None:
    url, _ = tls_server
    with pytest.raises(requests.exceptions.SSLError) as caught:
        requests.get(f"{url}/v1/status/leader", timeout=10)
    why = unreachable(caught.value)
    assert why.startswith(f"cannot reach Nomad at {url}: certificate not trusted: set NOMAD_CACERT")
