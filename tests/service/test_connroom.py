"""Which connection gives way at the cap, and whose requests may use the reserve (pure, and one socket pair for
the peek at a new connection's head; the server tests that wire them are in test_unread_answers.py)."""

from __future__ import annotations

import socket

import pytest

from nomad_gpu.service.config.limits import HttpLimits
from nomad_gpu.service.http.connections import waiting_bytes
from nomad_gpu.service.http.connroom import (
    UNTRUSTED_ONLY,
    Standing,
    Trust,
    head_fields,
    pick_eviction,
    reserve_for,
    room_for,
    token_digests,
    trust_of,
    untrusted_fits,
)

BUSY_UNTRUSTED = Standing(Trust.UNTRUSTED)
TOKEN = "0123456789abcdef-team"
DIGESTS = token_digests([TOKEN, "another-token-0123456789"])


@pytest.mark.parametrize("standings, expected", [
    pytest.param({"a": BUSY_UNTRUSTED, "b": Standing(Trust.TRUSTED)}, None, id="all-mid-request"),
    pytest.param({"busy": BUSY_UNTRUSTED, "idle": Standing(Trust.TRUSTED, waiting_since=5.0)}, "idle",
                 id="only-one-may-go"),
    pytest.param({"trusted": Standing(Trust.TRUSTED, waiting_since=1.0),
                  "fresh": Standing(Trust.FRESH, waiting_since=2.0),
                  "untrusted": Standing(Trust.UNTRUSTED, waiting_since=3.0)}, "untrusted", id="untrusted-first"),
    pytest.param({"trusted": Standing(Trust.TRUSTED, blocked_since=1.0),
                  "fresh": Standing(Trust.FRESH, waiting_since=2.0)}, "fresh", id="fresh-before-trusted"),
    pytest.param({"waiting": Standing(Trust.UNTRUSTED, waiting_since=1.0),
                  "unread": Standing(Trust.UNTRUSTED, blocked_since=9.0)}, "unread", id="unread-before-waiting"),
    pytest.param({"new": Standing(Trust.FRESH, waiting_since=9.0),
                  "old": Standing(Trust.FRESH, waiting_since=1.0)}, "old", id="longest-waiting"),
    pytest.param({"new": Standing(Trust.UNTRUSTED, waiting_since=1.0, blocked_since=9.0),
                  "old": Standing(Trust.UNTRUSTED, blocked_since=2.0)}, "old", id="longest-unread"),
])
def test_the_connection_that_gives_way(standings: dict[str, Standing], expected: str | None) -> None:
    assert pick_eviction(standings.items()) == expected


def test_room_for_an_untrusted_request_is_made_only_by_untrusted_connections() -> None:
    standings = {"fresh": Standing(Trust.FRESH, waiting_since=1.0),
                 "trusted": Standing(Trust.TRUSTED, blocked_since=1.0), "busy": BUSY_UNTRUSTED}
    assert pick_eviction(standings.items(), UNTRUSTED_ONLY) is None
    standings["idle"] = Standing(Trust.UNTRUSTED, waiting_since=50.0)
    assert pick_eviction(standings.items(), UNTRUSTED_ONLY) == "idle"


@pytest.mark.parametrize("newcomer, expected", [
    pytest.param(Trust.UNTRUSTED, None, id="untrusted-never-takes-a-trusted-place"),
    pytest.param(Trust.FRESH, "trusted", id="unknown-may"),
    pytest.param(Trust.TRUSTED, "trusted", id="trusted-may"),
])
def test_whose_place_a_newcomer_may_take(newcomer: Trust, expected: str | None) -> None:
    standings = {"trusted": Standing(Trust.TRUSTED, waiting_since=1.0), "busy": BUSY_UNTRUSTED}
    assert pick_eviction(standings.items(), room_for(newcomer)) == expected
    standings["fresh"] = Standing(Trust.FRESH, waiting_since=9.0)
    assert pick_eviction(standings.items(), room_for(newcomer)) == "fresh"


def test_the_bytes_waiting_in_a_socket_are_seen_and_left_there() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert waiting_bytes(ours.fileno()) == b""
        theirs.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert waiting_bytes(ours.fileno()) == waiting_bytes(ours.fileno(), 64) == b"GET / HTTP/1.1\r\n\r\n"
        assert waiting_bytes(ours.fileno(), 3) == b"GET"
        assert ours.recv(64) == b"GET / HTTP/1.1\r\n\r\n"  # still there, and the descriptor still open
        theirs.sendall(b"abc")
        assert waiting_bytes(ours.fileno(), peek=False) == b"abc"
        assert waiting_bytes(ours.fileno()) == b""  # taken


@pytest.mark.parametrize("data, fields", [
    pytest.param(b"GET / HTTP/1.1\r\nHost: a\r\nAuthorization:  Bearer x \r\n\r\nGET /next",
                 [(b"host", b"a"), (b"authorization", b"Bearer x")], id="whole-head"),
    pytest.param(b"GET / HTTP/1.1\r\nHost: a\r\n", None, id="head-not-all-there"),
    pytest.param(b"", None, id="nothing-yet"),
    pytest.param(b"GET / HTTP/1.1\r\n\r\n", [], id="no-fields"),
    pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", None, id="tls-hello"),
    pytest.param(b"GET / HTTP/1.1\r\nno colon\r\nX-Nomad-Gpu-Client: cli\r\n\r\n",
                 [(b"x-nomad-gpu-client", b"cli")], id="junk-line-skipped"),
])
def test_the_fields_of_a_head_peeked_at(data: bytes, fields: list[tuple[bytes, bytes]] | None) -> None:
    assert head_fields(data) == fields


@pytest.mark.parametrize("limits, cap, reserve", [
    pytest.param(HttpLimits(), 1000, 100, id="default-tenth"),
    pytest.param(HttpLimits(), 300, 30, id="cap-lowered-by-descriptors"),
    pytest.param(HttpLimits(max_connections=100, reserved_connections=25), 100, 25, id="configured"),
    pytest.param(HttpLimits(max_connections=100, reserved_connections=99), 40, 39, id="scaled-leaves-one"),
    pytest.param(HttpLimits(max_connections=5), 5, 0, id="small-cap-none"),
    pytest.param(HttpLimits(max_connections=1, reserved_connections=0), 1, 0, id="cap-one"),
])
def test_the_reserve(limits: HttpLimits, cap: int, reserve: int) -> None:
    assert reserve_for(limits, cap) == reserve


def test_untrusted_connections_stop_short_of_the_reserve() -> None:
    assert untrusted_fits(90, cap=100, reserve=10)
    assert not untrusted_fits(91, cap=100, reserve=10)
    assert untrusted_fits(100, cap=100, reserve=0)


@pytest.mark.parametrize("headers, digests, trust", [
    pytest.param([(b"authorization", f"Bearer {TOKEN}".encode())], DIGESTS, Trust.TRUSTED, id="bearer"),
    pytest.param([(b"authorization", f"bearer  {TOKEN} ".encode())], DIGESTS, Trust.TRUSTED, id="bearer-case"),
    pytest.param([(b"x-nomad-gpu-token", TOKEN.encode())], DIGESTS, Trust.TRUSTED, id="token-header"),
    pytest.param([(b"authorization", b"Bearer 0123456789abcdef-tean")], DIGESTS, Trust.UNTRUSTED, id="wrong-token"),
    pytest.param([(b"authorization", f"Basic {TOKEN}".encode())], DIGESTS, Trust.UNTRUSTED, id="not-bearer"),
    pytest.param([(b"x-nomad-gpu-client", b"cli")], DIGESTS, Trust.UNTRUSTED, id="client-header-with-tokens"),
    pytest.param([(b"x-nomad-gpu-client", b"cli")], frozenset(), Trust.TRUSTED, id="client-header-no-tokens"),
    pytest.param([(b"authorization", f"Bearer {TOKEN}".encode())], frozenset(), Trust.UNTRUSTED,
                 id="any-token-no-tokens"),
    pytest.param([(b"host", b"localhost")], frozenset(), Trust.UNTRUSTED, id="page-load"),
    pytest.param([(b"authorization", b"Bearer \xff\xfe")], DIGESTS, Trust.UNTRUSTED, id="not-text"),
])
def test_trust_of_a_request_head(headers: list[tuple[bytes, bytes]], digests: frozenset[bytes], trust: Trust) -> None:
    assert trust_of(headers, digests) is trust
