"""`GET /v1/event/stream`: NDJSON frames from the broker, flushed one by one.

Separate from the rest of the HTTP app because it is the one long-lived response and the one whose
timing is measured (handoff latency). Framing follows reference section 1: `{}` as soon as the
client connects and every `heartbeat_s` after that, then one `{"Index":n,"Events":[...]}` line per
raft index. Each frame is yielded as its own body chunk, so uvicorn writes it to the socket at once.

Nomad (1.11.2+) hijacks the socket and simply closes it to end a stream; here the response carries
`Connection: close`, so ending the generator (a dropped stream, the server stopping) closes the TCP
connection too, and the client sees the stream end without any closing message, as with Nomad.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from .events import EventBroker, StreamRequestError, Subscription, parse_index, parse_topics

HEARTBEAT = b"{}\n"


def stream_endpoint(broker: EventBroker, heartbeat_s: float) -> Callable[[Request], Awaitable[Response]]:
    """Build the Starlette endpoint for a broker; `heartbeat_s` is 30 in Nomad."""
    if heartbeat_s <= 0:
        raise ValueError("heartbeat_s must be positive")

    async def event_stream(request: Request) -> Response:
        try:
            topics = parse_topics(request.query_params.getlist("topic"))
            index = parse_index(request.query_params.get("index"))
        except StreamRequestError as exc:
            return PlainTextResponse(str(exc), status_code=400)
        namespace = request.query_params.get("namespace") or "default"
        subscription, backlog = broker.subscribe(topics, namespace, index, asyncio.get_running_loop())
        return StreamingResponse(
            _frames(broker, subscription, backlog, heartbeat_s),
            media_type="application/json",
            headers={"Cache-Control": "no-cache", "Connection": "close"},
        )

    return event_stream


async def _frames(broker: EventBroker, subscription: Subscription, backlog: list[bytes],
                  heartbeat_s: float) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    try:
        yield HEARTBEAT
        for frame in backlog:
            yield frame
        next_heartbeat = loop.time() + heartbeat_s
        while True:
            timeout = next_heartbeat - loop.time()
            if timeout <= 0:
                next_heartbeat += heartbeat_s
                yield HEARTBEAT
                continue
            try:
                data = await asyncio.wait_for(subscription.queue.get(), timeout)
            except TimeoutError:
                continue
            if data is None:  # dropped by fault injection or server stop: end the stream
                return
            yield data
    finally:
        broker.unsubscribe(subscription)
