"""Workload classes: (class, size, policy, fleet facts) -> ordered tiers of alternatives, as tables."""

from __future__ import annotations

import pytest

from nomad_gpu.domain.classes import (
    DEFAULT_CLASS_POLICY,
    GIB,
    MIB,
    ClassPolicy,
    ClassRule,
    KindName,
    OptionFact,
    Size,
    WorkloadClass,
    fleet_facts,
    share_milli,
    tiers_for,
)
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import InstanceId
from nomad_gpu.domain.inventory import Inventory, MigSlice
from nomad_gpu.domain.requests import GpuAsk, GpuShare, MigSlices, WholeGpus
from nomad_gpu.domain.units import MigProfile

from .builders import A100, H100, L40S, make_node, mig_slices, plugin_shared_gpus, shared_gpus, whole_gpus

# What Nomad reports (the fingerprint's `memory`, MiB): an H100 SXM's MIG instances per `nvidia-smi mig -lgip`
# (9.75 / 19.62 / 39.50 GiB), an A100-80GB's 1g.10gb (9.5 GiB), an L40S whole.
H100_1G, H100_2G, H100_3G, A100_1G, L40S_MIB, H100_MIB = 9984, 20096, 40448, 9728, 46068, 81559

FLEET = (
    OptionFact("gpu", H100, H100_MIB),
    OptionFact("gpu", A100, 81920),
    OptionFact("mig", H100, H100_1G, profile="1g.10gb"),
    OptionFact("mig", H100, H100_2G, profile="2g.20gb"),
    OptionFact("mig", H100, H100_3G, profile="3g.40gb"),
    OptionFact("mig", A100, A100_1G, profile="1g.10gb"),
    OptionFact("share", L40S, L40S_MIB, slots=4),
)


def alts(cls: WorkloadClass, size: Size, fleet: tuple[OptionFact, ...] = FLEET,
         policy: ClassPolicy = DEFAULT_CLASS_POLICY) -> list[tuple[int, tuple[GpuAsk, ...]]]:
    return [(t.number, t.alternatives) for t in tiers_for(cls, size, policy, fleet)]


S, T, H, E, INT = (WorkloadClass.SERVING, WorkloadClass.TRAINING, WorkloadClass.HPO, WorkloadClass.EXPLORATORY,
                 WorkloadClass.INTERACTIVE)


@pytest.mark.parametrize(
    ("cls", "size", "expected"),
    [
        pytest.param(S, Size(14 * GIB), [
            (1, (MigSlices("2g.20gb", 1, frozenset({H100})), MigSlices("3g.40gb", 1, frozenset({H100})))),
            (2, (WholeGpus(1, frozenset(), 14 * 1024),)),
        ], id="serving-14gib-mig-then-whole-never-share"),
        pytest.param(S, Size(9984 * MIB), [
            (1, (MigSlices("1g.10gb", 1, frozenset({H100})), MigSlices("2g.20gb", 1, frozenset({H100})),
                 MigSlices("3g.40gb", 1, frozenset({H100})))),
            (2, (WholeGpus(1, frozenset(), 9984),)),
        ], id="serving-9.75gib-fits-an-h100-1g-not-an-a100-1g"),
        pytest.param(S, Size(10 * GIB), [
            (1, (MigSlices("2g.20gb", 1, frozenset({H100})), MigSlices("3g.40gb", 1, frozenset({H100})))),
            (2, (WholeGpus(1, frozenset(), 10240),)),
        ], id="serving-10gib-does-not-fit-a-1g.10gb"),
        pytest.param(S, Size(9 * GIB), [
            (1, (MigSlices("1g.10gb", 1, frozenset({A100, H100})), MigSlices("2g.20gb", 1, frozenset({H100})),
                 MigSlices("3g.40gb", 1, frozenset({H100})))),
            (2, (WholeGpus(1, frozenset(), 9216),)),
        ], id="serving-9gib-one-profile-over-two-models"),
        pytest.param(S, Size(100 * GIB), [(1, ()), (2, ())], id="serving-bigger-than-any-gpu-empty-tiers-kept"),
        pytest.param(T, Size(None, 4), [(1, (WholeGpus(4),))], id="training-count-any-memory"),
        pytest.param(T, Size(80 * GIB, 2), [(1, (WholeGpus(2, frozenset(), 81920),))], id="training-memory-80gib"),
        pytest.param(T, Size(80 * GIB + 1, 2), [(1, ())], id="training-one-byte-over-every-gpu"),
        pytest.param(H, Size(10 * GIB), [
            (1, (GpuShare(250, frozenset({L40S})),)),
            (2, (MigSlices("2g.20gb", 1, frozenset({H100})), MigSlices("3g.40gb", 1, frozenset({H100})))),
            (3, (WholeGpus(1, frozenset(), 10240),)),
        ], id="hpo-share-first-sized-to-slots"),
        pytest.param(E, Size(12 * GIB), [
            (1, (GpuShare(500, frozenset({L40S})),)),
            (2, (MigSlices("2g.20gb", 1, frozenset({H100})), MigSlices("3g.40gb", 1, frozenset({H100})))),
            (3, (WholeGpus(1, frozenset(), 12288),)),
        ], id="exploratory-12gib-takes-two-of-four-slots"),
        pytest.param(INT, Size(10 * GIB, 2), [
            (1, ()),
            (2, (MigSlices("2g.20gb", 2, frozenset({H100})), MigSlices("3g.40gb", 2, frozenset({H100})))),
            (3, (WholeGpus(2, frozenset(), 10240),)),
        ], id="interactive-two-devices-no-share"),
        pytest.param(H, Size(8 * GIB, 1, frozenset({A100})), [
            (1, ()),
            (2, (MigSlices("1g.10gb", 1, frozenset({A100})),)),
            (3, (WholeGpus(1, frozenset({A100}), 8192),)),
        ], id="models-restrict-every-tier"),
    ],
)
def test_default_tiers(cls: WorkloadClass, size: Size, expected: list[tuple[int, tuple[GpuAsk, ...]]]) -> None:
    assert alts(cls, size) == expected


@pytest.mark.parametrize(
    ("need", "memory_mib", "slots", "milli"),
    [
        pytest.param(10 * GIB, 40960, 4, 250, id="a-quarter-is-one-of-four-slots"),
        pytest.param(10 * GIB + 1, 40960, 4, 500, id="a-byte-over-takes-a-second-slot"),
        pytest.param(10 * GIB, 40960, 3, 333, id="a-third-slot-is-333"),
        pytest.param(10 * GIB, 40960, 0, 250, id="no-slots-counted-in-milli"),
        pytest.param(10 * GIB + 1, 40960, 0, 251, id="no-slots-rounded-up-to-a-milli"),
        pytest.param(40 * GIB, 40960, 4, 1000, id="the-whole-memory-is-every-slot"),
        pytest.param(40 * GIB + 1, 40960, 4, None, id="more-than-the-gpu"),
    ],
)
def test_share_milli_covers_the_need(need: int, memory_mib: int, slots: int, milli: int | None) -> None:
    assert share_milli(need, memory_mib, slots) == milli


def test_an_operator_policy_reorders_and_merges_tiers() -> None:
    policy = ClassPolicy({H: ClassRule((("mig", "gpu"), ("share",)))})
    assert alts(H, Size(20 * GIB), policy=policy) == [  # a 2g.20gb reports 19.62 GiB: it does not hold 20
        (1, (MigSlices("3g.40gb", 1, frozenset({H100})), WholeGpus(1, frozenset(), 20480))),
        (2, (GpuShare(500, frozenset({L40S})),)),
    ]
    assert alts(S, Size(20 * GIB), policy=policy)[0][0] == 1  # a class the config leaves out keeps its default


@pytest.mark.parametrize(
    ("cls", "kind", "refused"),
    [
        pytest.param(S, "share", "class serving with share: is refused: it breaks isolation", id="serving-share"),
        pytest.param(S, "mig", None, id="serving-mig"),
        pytest.param(S, "gpu", None, id="serving-gpu"),
        pytest.param(T, "gpu", None, id="training-gpu"),
        pytest.param(T, "share", "class training with share: is refused: it breaks isolation", id="training-share"),
        pytest.param(T, "mig", "class training with mig: is refused: training takes gpu", id="training-mig"),
        pytest.param(H, "share", None, id="hpo-share"),
        pytest.param(H, "gpu", None, id="hpo-gpu"),
    ],
)
def test_explicit_kinds_are_checked_against_the_class(cls: WorkloadClass, kind: KindName,
                                                      refused: str | None) -> None:
    if refused is None:
        DEFAULT_CLASS_POLICY.check_explicit(cls, kind)
        return
    with pytest.raises(InvalidRequest) as info:
        DEFAULT_CLASS_POLICY.check_explicit(cls, kind)
    assert str(info.value).startswith(refused)
    assert "\n" not in str(info.value)


def test_the_operator_may_allow_an_explicit_share_beside_serving() -> None:
    policy = ClassPolicy({S: ClassRule((("mig",), ("gpu",)), allow_explicit=frozenset({"share"}))})
    policy.check_explicit(S, "share")


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        pytest.param(lambda: ClassRule(()), "at least one tier", id="no-tiers"),
        pytest.param(lambda: ClassRule(((),)), "at least one tier", id="empty-tier"),
        pytest.param(lambda: ClassRule((("mig",), ("mig",))), "listed twice", id="kind-twice"),
        pytest.param(lambda: ClassRule((("tpu",),)), "unknown kind(s) tpu", id="unknown-kind"),
        pytest.param(lambda: ClassRule((("gpu",),), default_count=0), "default_count", id="count-zero"),
    ],
)
def test_a_bad_rule_is_refused(rule: object, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message.replace("(", r"\(").replace(")", r"\)")):
        rule()  # type: ignore[operator]


def test_fleet_facts_come_from_the_inventory() -> None:
    nodes = [
        make_node("n1", gpus=whole_gpus("n1", 2, H100, memory_mib=H100_MIB)),
        make_node("n2", migs=mig_slices("n2", "3g.40gb", 2)
                  + (MigSlice(InstanceId("MIG-n2-1g"), H100, MigProfile.parse("1g.10gb"), H100_1G),)),
        make_node("n3", gpus=plugin_shared_gpus("n3", 2, 4, L40S) + shared_gpus("n3", 1, A100, slots=3, start=5)),
    ]
    assert fleet_facts(Inventory.of(nodes)) == (
        OptionFact("gpu", H100, H100_MIB),
        OptionFact("mig", H100, H100_1G, profile="1g.10gb"),
        OptionFact("mig", H100, 40960, profile="3g.40gb"),
        OptionFact("share", A100, 81920, slots=3),
        OptionFact("share", L40S, 81920, slots=4),
    )


def test_same_input_same_tiers_whatever_the_fact_order() -> None:
    forward = tiers_for(E, Size(9 * GIB), DEFAULT_CLASS_POLICY, FLEET)
    assert tiers_for(E, Size(9 * GIB), DEFAULT_CLASS_POLICY, tuple(reversed(FLEET))) == forward
