"""The config's ``api.http`` section: connection deadlines, the cap, pipelining and the reserve."""

from __future__ import annotations

from typing import Any

import pytest

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.config.limits import HttpLimits, http_limits_from_mapping
from nomad_gpu.service.config.settings import access_from_mapping


def test_defaults() -> None:
    limits = access_from_mapping({}).http
    assert limits == HttpLimits()
    assert (limits.write_timeout_s, limits.max_pipelined, limits.reserved) == (10.0, 8, 100)


def test_the_reserve_defaults_to_a_tenth_of_the_cap() -> None:
    assert http_limits_from_mapping({"max_connections": 250}).reserved == 25
    assert http_limits_from_mapping({"max_connections": 250, "reserved_connections": 0}).reserved == 0


def test_given_values() -> None:
    got = http_limits_from_mapping({"write_timeout_s": 2.5, "max_pipelined": 3, "max_connections": 50,
                                    "reserved_connections": 7})
    assert (got.write_timeout_s, got.max_pipelined, got.max_connections, got.reserved) == (2.5, 3, 50, 7)


@pytest.mark.parametrize("raw, words", [
    pytest.param({"write_timeout_s": 0}, "write_timeout_s: must be a number above 0", id="no-write-time"),
    pytest.param({"max_pipelined": "8"}, "max_pipelined: must be a number", id="pipelined-text"),
    pytest.param({"reserved_connections": 100, "max_connections": 100}, "reserved_connections: must be a whole",
                 id="reserve-the-whole-cap"),
    pytest.param({"reserved_connections": -1}, "reserved_connections", id="negative-reserve"),
    pytest.param({"reserved_connections": 2.5}, "reserved_connections", id="fractional-reserve"),
    pytest.param({"reserved_connections": True}, "reserved_connections", id="boolean-reserve"),
    pytest.param({"max_pipelined": 1, "pipelined": 2}, "unknown key", id="unknown-key"),
])
def test_bad_values_are_refused_naming_the_key(raw: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidRequest, match=words):
        http_limits_from_mapping(raw)
