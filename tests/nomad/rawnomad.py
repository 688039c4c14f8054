"""A scripted Nomad agent on a raw socket, writing the event stream's bytes in either framing.

The client's stream reader is tested against the exact bytes each Nomad version puts on the wire,
independently of the dev cluster (which has framing tests of its own):
- 1.11.2 and later (`command/agent/event_endpoint.go`, v2.0.5): the handler hijacks the connection and
  writes `HTTP/1.1 200 OK` itself, with `Connection: close` and no length or chunking; every `Write` is
  its own `conn.Write` (the JSON, then "\n"); the body ends when the connection closes.
- 1.11.1 and earlier (same file, v1.11.1): net/http's chunked body, one chunk per flushed write, gzip
  (gorilla/handlers `CompressHandler`, v1.5.2) when the request accepts it.
"""

from __future__ import annotations

import json
import socket
import threading
import zlib
from collections.abc import Callable
from typing import Any

HIJACKED_HEAD = (b"HTTP/1.1 200 OK\r\nConnection: close\r\nCache-Control: no-cache\r\n"
                 b"Content-Type: application/json\r\nVary: Accept-Encoding\r\n\r\n")


def chunked_head(gzip: bool) -> bytes:
    encoding = b"Content-Encoding: gzip\r\n" if gzip else b""
    return (b"HTTP/1.1 200 OK\r\nCache-Control: no-cache\r\n" + encoding + b"Content-Type: application/json\r\n"
            b"Date: Tue, 01 Dec 2026 04:00:00 GMT\r\nVary: Accept-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n")


class Conn:
    """One accepted connection; `write` puts one flushed write on the wire in the chosen framing."""

    def __init__(self, sock: socket.socket, framing: str) -> None:
        self.sock = sock
        self.framing = framing
        self._gzip = zlib.compressobj(6, zlib.DEFLATED, 31) if framing == "chunked-gzip" else None

    def head(self) -> None:
        self.sock.sendall(HIJACKED_HEAD if self.framing == "hijacked" else chunked_head(self._gzip is not None))

    def write(self, data: bytes) -> None:
        if self.framing == "hijacked":
            self.sock.sendall(data)
            return
        if self._gzip is not None:
            data = self._gzip.compress(data) + self._gzip.flush(zlib.Z_SYNC_FLUSH)
        self.sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))

    def frame(self, obj: Any) -> None:
        """What Nomad does per frame: the JSON in one write, the newline in the next."""
        self.write(json.dumps(obj, separators=(",", ":")).encode())
        self.write(b"\n")

    def end(self) -> None:
        """The end of a body: a close (hijacked) or the last chunk (chunked), then the close."""
        if self.framing != "hijacked":
            if self._gzip is not None:
                tail = self._gzip.flush(zlib.Z_FINISH)
                self.sock.sendall(b"%x\r\n%s\r\n" % (len(tail), tail))
            self.sock.sendall(b"0\r\n\r\n")
        self.sock.close()


Script = Callable[[Conn, int], None]


class ScriptedNomad:
    """Serves every connection to `script(conn, n)` (n counts connections from 0) on its own thread."""

    def __init__(self, framing: str, script: Script) -> None:
        self.framing = framing
        self.script = script
        self.requests: list[bytes] = []
        self.release = threading.Event()  # scripts wait on it to hold a connection open
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._socks: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    @property
    def connections(self) -> int:
        return len(self.requests)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks.append(sock)
            threading.Thread(target=self._serve, args=(sock, len(self._socks) - 1), daemon=True).start()

    def _serve(self, sock: socket.socket, n: int) -> None:
        head = b""
        try:
            while b"\r\n\r\n" not in head:
                data = sock.recv(4096)
                if not data:
                    return
                head += data
            self.requests.append(head)
            self.script(Conn(sock, self.framing), n)
        except OSError:
            pass

    def close(self) -> None:
        self.release.set()
        self._listener.close()
        for sock in self._socks:
            try:
                sock.close()
            except OSError:
                pass

    def __enter__(self) -> ScriptedNomad:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


FRAMINGS = ("hijacked", "chunked", "chunked-gzip")


def alloc_event_frame(index: int, alloc_id: str = "a1", status: str = "running") -> dict[str, Any]:
    alloc = {"ID": alloc_id, "JobID": "ngpu-q000001", "TaskGroup": "main", "NodeID": "n1", "ClientStatus": status,
             "ModifyIndex": index}
    return {"Index": index, "Events": [{"Topic": "Allocation", "Type": "AllocationUpdated", "Key": alloc_id,
                                        "Namespace": "default", "FilterKeys": ["ngpu-q000001", ""], "Index": index,
                                        "Payload": {"Allocation": alloc}}]}
