"""Submitting a spec with a class: explicit kinds checked against the class's policy, in one line."""

from __future__ import annotations

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, gpu_node

from nomad_gpu.domain.classes import GIB, ClassPolicy, ClassRule, WorkloadClass
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.requests import WholeGpus
from nomad_gpu.render import JobSpec, load_spec
from nomad_gpu.service.asks.classes import check_classes, size_of
from nomad_gpu.service.config.classconfig import classes_from_mapping
from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore

BASE = {"name": "svc", "team": "t", "task": {"image": "busybox"}}


def service(policy: ClassPolicy | None = None) -> SchedulerService:
    settings = SchedulingSettings(tick_s=0.01, classes=policy or ClassPolicy())
    svc = SchedulerService(SqliteStore(), FakeNomad(), settings, clock=Clock(), executor=ManualExecutor())
    svc.on_resync([gpu_node("n1", 1)], [])
    return svc


def test_serving_with_a_share_is_refused_in_one_line() -> None:
    svc = service()
    with pytest.raises(InvalidRequest) as info:
        svc.submit({**BASE, "class": "serving", "share": {"milli": 250}})
    assert str(info.value) == ("groups[main]: class serving with share: is refused: it breaks isolation "
                               "(the service config's classes.serving.allow_explicit can allow it)")
    assert svc.store.list() == []


def test_the_operator_may_allow_it() -> None:
    svc = service(classes_from_mapping({"serving": {"allow_explicit": ["share"]}}))
    check_classes(load_spec("name: a\nclass: serving\ntask: {image: b}\nshare: {milli: 250}\n"), svc.settings.classes)


def test_a_group_class_overrides_the_job_class_in_the_check() -> None:
    spec = load_spec("name: a\nclass: serving\ngroups:\n  - {name: nb, class: interactive, task: {image: b},"
                     " share: {milli: 250}}\n")
    check_classes(spec, ClassPolicy())


def test_explicit_kinds_the_class_takes_are_accepted_and_a_sweep_default_checks_nothing() -> None:
    svc = service()
    (entry,) = svc.submit({**BASE, "class": "training", "gpu": {"count": 1}})
    assert entry.spec["class"] == "training"
    sweep = load_spec("name: s\nkind: sweep\nsweep: {parameters: {lr: [1]}}\ntask: {image: b}\nshare: {milli: 250}\n")
    check_classes(sweep, ClassPolicy({WorkloadClass.HPO: ClassRule((("gpu",),))}))


@pytest.mark.parametrize(
    ("text", "need", "count"),
    [
        pytest.param("class: serving\ngpu_memory: 14GiB\n", 14 * GIB, 1, id="stated"),
        pytest.param("class: serving\n", 8 * GIB, 1, id="serving-default"),
        pytest.param("class: training\n", None, 1, id="training-default-any-memory"),
        pytest.param("class: training\ngpu: {count: 4}\ngpu_memory: 40\n", 40 * GIB, 4, id="training-count"),
    ],
)
def test_a_group_is_sized_by_its_spec_else_by_the_class_default(text: str, need: int | None, count: int) -> None:
    spec = load_spec("name: a\ntask: {image: b}\n" + text)
    assert isinstance(spec, JobSpec)
    size = size_of(spec, spec.groups[0], ClassPolicy())
    assert (size.need, size.count) == (need, count)


def test_gpu_memory_beside_gpu_is_a_memory_floor_on_whole_gpus() -> None:
    svc = service()
    (entry,) = svc.submit({**BASE, "gpu": {"count": 1}, "gpu_memory": "79.5GiB"})
    request = svc.life.entries[entry.id].request
    assert request is not None
    gpu = request.asks[0].gpu
    assert isinstance(gpu, WholeGpus) and gpu.min_memory_mib == 81408
