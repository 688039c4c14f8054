"""The event stream's framing: the body's bytes as the socket delivers them, split into JSON lines.

Nomad frames `/v1/event/stream` two ways (chunked up to 1.11.1, a hijacked connection from 1.11.2,
`command/agent/event_endpoint.go`); neither may delay a frame until more bytes come, so the reading and
the splitting are done here rather than by requests (:meth:`nomad_gpu.nomad.client.NomadClient.event_stream`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import requests

logger = logging.getLogger(__name__)

_READ_MAX = 64 * 1024


def arrivals(resp: requests.Response) -> Iterator[bytes]:
    """The body's bytes, decoded, as soon as the socket has any; ends at the end of the body.

    `read1` returns what one read of the socket (or of the current chunk) gives, so a heartbeat is
    seen when it arrives, in either framing; b"" only at the end of the body.
    """
    raw = resp.raw
    while True:
        data = raw.read1(_READ_MAX, decode_content=True)
        if not data:
            return
        yield data


def ndjson(chunks: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    """Split a byte stream into JSON lines as soon as each line is complete (each byte is copied once:
    a read of many frames is split in one pass, not re-sliced after every line)."""
    buf = b""
    for chunk in chunks:
        if b"\n" not in chunk:
            buf += chunk
            continue
        *lines, buf = (buf + chunk).split(b"\n")
        for raw in lines:
            line = raw.strip()
            if line:
                try:
                    yield json.loads(line)
                except ValueError:
                    logger.warning("event stream: skipped a line that is not JSON (%d bytes)", len(line))
    if buf.strip():
        # up to 1.11.1 a late error is written into the body after the last frame, without a newline
        logger.info("event stream ended with: %s", buf.strip()[:200].decode(errors="replace"))
