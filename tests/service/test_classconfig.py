"""The `classes:` section of the service config: defaults as documented, overrides per key, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from nomad_gpu.domain.classes import DEFAULT_RULES, GIB, MIB, ClassRule, WorkloadClass
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.config.classconfig import classes_from_mapping
from nomad_gpu.service.config.settings import load_config, scheduling_from_mapping

S, T, H, E, INT = (WorkloadClass.SERVING, WorkloadClass.TRAINING, WorkloadClass.HPO, WorkloadClass.EXPLORATORY,
                   WorkloadClass.INTERACTIVE)


def test_the_defaults_are_the_documented_policy() -> None:
    policy = scheduling_from_mapping({}).classes
    assert policy.rule(S) == ClassRule((("mig",), ("gpu",)), default_gpu_memory=8 * GIB)
    assert policy.rule(T) == ClassRule((("gpu",),))
    for cls in (H, E, INT):
        assert policy.rule(cls) == ClassRule((("share",), ("mig",), ("gpu",)), default_gpu_memory=8 * GIB)
    assert policy.rule(S).isolated and policy.rule(T).isolated and not policy.rule(H).isolated


def test_a_class_overrides_only_the_keys_it_gives() -> None:
    policy = classes_from_mapping({
        "serving": {"allow_explicit": ["share"]},
        "hpo": {"tiers": [["mig", "gpu"], ["share"]], "default_gpu_memory": "14336MiB"},
        "training": {"default_count": 2, "default_gpu_memory": 40},
    })
    assert policy.rule(S) == ClassRule((("mig",), ("gpu",)), default_gpu_memory=8 * GIB,
                                       allow_explicit=frozenset({"share"}))
    assert policy.rule(H) == ClassRule((("mig", "gpu"), ("share",)), default_gpu_memory=14336 * MIB)
    assert policy.rule(T) == ClassRule((("gpu",),), default_gpu_memory=40 * GIB, default_count=2)
    assert policy.rule(E) == DEFAULT_RULES[E]


def test_a_config_file_carries_the_policy(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("classes:\n  exploratory:\n    default_gpu_memory: 15GB\n", encoding="utf-8")
    scheduling, _ = load_config(str(path))
    assert scheduling.classes.rule(E).default_gpu_memory == 15 * 10**9


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param({"classes": ["serving"]}, "config: classes: must be a mapping", id="not-a-mapping"),
        pytest.param({"classes": {"inference": {}}}, "config: classes: unknown class 'inference'", id="unknown-class"),
        pytest.param({"classes": {"serving": {"tier": []}}}, "config: classes.serving: unknown key(s) tier",
                     id="unknown-key"),
        pytest.param({"classes": {"serving": {"tiers": []}}}, "config: classes.serving.tiers: must be a non-empty",
                     id="no-tiers"),
        pytest.param({"classes": {"serving": {"tiers": [["mig"], ["tpu"]]}}},
                     "config: classes.serving.tiers[1]: unknown kind 'tpu'", id="unknown-kind"),
        pytest.param({"classes": {"serving": {"tiers": [["mig"], ["mig"]]}}},
                     "config: classes.serving: tiers: a kind is listed twice", id="kind-twice"),
        pytest.param({"classes": {"hpo": {"default_gpu_memory": "8gb"}}},
                     "config: classes.hpo.default_gpu_memory: unknown unit 'gb'", id="bad-size"),
        pytest.param({"classes": {"training": {"default_count": 0}}},
                     "config: classes.training.default_count: must be an integer from 1 to 64", id="count-zero"),
        pytest.param({"classes": {"serving": {"allow_explicit": "share"}}},
                     "config: classes.serving.allow_explicit: must be a list of kinds", id="allow-not-a-list"),
        pytest.param({"classes": {"serving": None}}, "config: classes.serving: must be a mapping", id="null-class"),
    ],
)
def test_a_bad_classes_section_is_one_line_naming_the_key(raw: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        scheduling_from_mapping(raw)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)
