"""Every bundled example against every bundled cluster, through the service's own checks.

What this asserts, precisely:

1. Each example is accepted at submission exactly on the bundled clusters listed for it in `MEANT_FOR`
   (and refused everywhere else as `Unschedulable`, the service's "no node could ever run it" answer,
   never with another error). The service is the real one (`SchedulerService.submit`: the class checks,
   the class tiers over the fleet's facts, the model names and the fleet check), over an inventory made
   from the cluster file the way the service sees it: the dev cluster's Node JSON for that file, read by
   the service's own decoder. Every example must run on the demo cluster (`mixed-fleet`).
2. Each tier and alternative an example's comment promises (`PROMISES`) is offered by the service's
   class tiers (`ClassBook.tiers`) on some bundled cluster, and a job asking that alternative alone could
   run there (`never_runs`): a `gpu_memory` that no promised MIG profile holds fails here. The comment
   must name each promised MIG profile, so the table and the example cannot drift apart.
"""

from __future__ import annotations

import dataclasses
from functools import cache

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, service

from nomad_gpu import bundled
from nomad_gpu.devcluster.config import load_cluster_file
from nomad_gpu.devcluster.inventory import build_nodes
from nomad_gpu.domain.errors import Unschedulable
from nomad_gpu.domain.feasible import never_runs
from nomad_gpu.domain.inventory import Inventory, Node
from nomad_gpu.domain.kinds import GpuAsk, MigSlices
from nomad_gpu.nomad.decode import decode_node
from nomad_gpu.render import JobSpec, SweepSpec, load_spec
from nomad_gpu.render.loading import decode_spec
from nomad_gpu.service.admission.fleetcheck import request_of
from nomad_gpu.service.asks.classes import ClassBook
from nomad_gpu.store import SqliteStore

ALL = frozenset(bundled.bundled_clusters())
MEANT_FOR: dict[str, frozenset[str]] = {
    "class-exploratory": ALL,
    "class-hpo": ALL,
    "class-interactive": ALL,
    "class-serving": ALL,
    "class-training": ALL,
    "gang": frozenset({"mixed-fleet"}),  # A100 workers
    "inference-mig": frozenset({"mixed-fleet", "mig-h100"}),  # a 3g.40gb MIG instance
    "notebook-reachable": ALL,
    "notebook-share": frozenset({"mixed-fleet"}),  # the one node with the nomad-gpu plugin's shared GPUs
    "serving-openai": ALL,
    "sweep": ALL,
    "train": ALL,
    "train-multi": frozenset({"mixed-fleet"}),  # 8 GPUs of 40 GB or more on one node
}
DEMO = "mixed-fleet"

PROMISES: dict[str, list[tuple[int, str, str | None]]] = {
    "class-hpo": [(1, "share", None), (2, "mig", "1g.10gb"), (3, "gpu", None)],
    "class-serving": [(1, "mig", "2g.20gb"), (2, "gpu", None)],
    "class-exploratory": [(1, "share", None)],
    "class-interactive": [(1, "share", None)],
    "notebook-reachable": [(1, "share", None)],
    "serving-openai": [(1, "mig", None), (2, "gpu", None)],
}
"""(tier, kind, MIG profile) each class example's comment promises."""
CORE_KIND = {"gpu": "whole", "mig": "mig", "share": "share"}
"""The spec's kind names as the core's kinds name themselves."""


@cache
def fleet(cluster: str) -> tuple[Node, ...]:
    nodes = build_nodes(load_cluster_file(bundled.bundled_cluster(cluster)))
    return tuple(decode_node(node.to_json()) for node in nodes)


def example(name: str) -> JobSpec | SweepSpec:
    return load_spec(bundled.jobspecs_dir() / f"{name}.yaml")


def accepted(name: str, cluster: str) -> bool:
    svc = service(SqliteStore(), FakeNomad(), Clock(), ManualExecutor())
    svc.on_resync(list(fleet(cluster)), [])
    try:
        svc.submit(decode_spec(bundled.example(name)).data)
    except Unschedulable:
        return False
    finally:
        svc.stop()
    return True


def test_the_tables_name_every_example_and_only_bundled_clusters() -> None:
    assert set(MEANT_FOR) == set(bundled.examples())
    assert all(clusters <= ALL and DEMO in clusters for clusters in MEANT_FOR.values())
    assert set(PROMISES) == {n for n in bundled.examples() if any(example(n).chooses_kind(g)
                                                                   for g in example(n).groups)}


@pytest.mark.parametrize("name", bundled.examples())
def test_each_example_is_accepted_on_the_clusters_meant_for_it(name: str) -> None:
    assert {c for c in sorted(ALL) if accepted(name, c)} == MEANT_FOR[name]


def offered(name: str, cluster: str) -> dict[int, list[GpuAsk]]:
    """The alternatives per tier the service offers the example's (first) class group on the cluster, each one
    a job could run alone there."""
    spec = example(name)
    book = ClassBook()
    book.observe(Inventory.of(fleet(cluster)))
    group = next(g for g in spec.groups if spec.chooses_kind(g))
    job = request_of(spec, book)
    ask = next(a for a in job.asks if a.group == group.name)
    runnable = {alt for alt in ask.alternatives() if never_runs(dataclasses.replace(job, asks=(alt,)),
                                                               fleet(cluster)) is None}
    return {tier.number: [alt for alt in tier.alternatives if ask.one_option(alt) in runnable]
            for tier in book.tiers(spec, group)}


@pytest.mark.parametrize(("name", "tier", "kind", "profile"), [
    pytest.param(name, tier, kind, profile, id=f"{name}-{tier}-{kind}{'-' + profile if profile else ''}")
    for name, promised in PROMISES.items() for tier, kind, profile in promised])
def test_every_promised_tier_is_offered_on_some_bundled_cluster(name: str, tier: int, kind: str,
                                                                 profile: str | None) -> None:
    if profile is not None:
        comment = "".join(line.partition("#")[2] for line in bundled.example(name).splitlines())
        assert profile in comment, f"{name}: its comment does not name {profile}"
    where = []
    for cluster in sorted(ALL):
        alternatives = [alt for alt in offered(name, cluster).get(tier, []) if alt.kind.name == CORE_KIND[kind]]
        if alternatives and (profile is None or any(isinstance(alt, MigSlices) and alt.profile == profile
                                                    for alt in alternatives)):
            where.append(cluster)
    assert where, f"{name}: tier {tier} ({kind} {profile or ''}) is offered on no bundled cluster"
