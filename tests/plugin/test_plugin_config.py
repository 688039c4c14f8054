"""The plugin's config block: schema defaults, cty-style msgpack decoding, and one-line refusals."""

from __future__ import annotations

import msgpack
import pytest

from nomad_gpu.plugin.config import ConfigError, PluginConfig, config_schema, decode_config, parse_duration


def cty(value: dict[str, object]) -> bytes:
    """go-cty's msgpack for an object: a map with sorted keys."""
    return msgpack.packb(dict(sorted(value.items())), use_bin_type=True)


def test_schema_gives_every_option_a_default() -> None:
    spec = config_schema()
    assert spec.WhichOneof("block") == "object"
    for name, attr in spec.object.attributes.items():
        assert attr.WhichOneof("block") == "default", name
        assert attr.default.primary.Attr.name == name and not attr.default.primary.Attr.required
        assert attr.default.default.literal.value


def test_empty_and_defaulted_configs() -> None:
    assert decode_config(b"") == PluginConfig()
    defaults = {"enabled": True, "fingerprint_period": "10s", "whole_gpus": True, "mig": True,
                "ignored_gpu_ids": [], "shared_gpus": {}, "mps_pipe_directory": "", "mps_pinned_memory": True}
    assert decode_config(cty(defaults)) == PluginConfig()


def test_full_config() -> None:
    cfg = decode_config(cty({"fingerprint_period": "1m30s", "shared_gpus": {"GPU-a": 4, "3": 2.0},
                             "ignored_gpu_ids": ["GPU-b"], "mps_pipe_directory": "/run/mps/{uuid}",
                             "whole_gpus": False}))
    assert cfg.fingerprint_period_s == 90 and cfg.shared_gpus == {"GPU-a": 4, "3": 2}
    assert cfg.slots_for("GPU-a", 0) == 4 and cfg.slots_for("GPU-z", 3) == 2 and cfg.slots_for("GPU-z", 1) is None
    assert cfg.ignored_gpu_ids == frozenset({"GPU-b"}) and not cfg.whole_gpus


@pytest.mark.parametrize(("text", "seconds"), [("10s", 10), ("1m", 60), ("500ms", 0.5), ("1h2m3s", 3723)])
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("config", "fragment"), [
    pytest.param({"fingerprint_period": "soon"}, "not a duration", id="bad-duration"),
    pytest.param({"fingerprint_period": "100ms"}, "at least 1s", id="too-fast"),
    pytest.param({"shared_gpus": {"GPU-a": 0}}, "whole number from 1 to 48", id="zero-slots"),
    pytest.param({"shared_gpus": {"GPU-a": 2.5}}, "whole number", id="fractional-slots"),
    pytest.param({"shared_gpus": {"GPU-a": 2}, "ignored_gpu_ids": ["GPU-a"]}, "both ignored and shared", id="both"),
    pytest.param({"mps_pipe_directory": "relative"}, "absolute", id="relative-pipe"),
    pytest.param({"mps_pipe_directory": "/run/{gpu}"}, "only {uuid} and {index}", id="bad-placeholder"),
    pytest.param({"enabled": "yes"}, "true or false", id="not-bool"),
    pytest.param({"share": 4}, "unknown config option", id="unknown-option"),
])
def test_bad_configs_are_one_clear_error(config: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("{", r"\{").replace("}", r"\}")):
        decode_config(cty(config))


def test_not_msgpack_and_not_an_object() -> None:
    with pytest.raises(ConfigError, match="msgpack"):
        decode_config(b"\xc1")
    with pytest.raises(ConfigError, match="object"):
        decode_config(msgpack.packb([1, 2]))
