"""Placements Nomad refuses, and how it says so: constraint checks with unknown targets and operators
(`checkConstraint`, `scheduler/feasible/feasible.go` v2.0.5), unhealthy drivers ("missing drivers"),
`distinct_hosts`, resource exhaustion; each refusal completes the evaluation with `FailedTGAllocs`
and leaves a `blocked` follow-up (`scheduler/generic_sched.go`, `nomad/structs/eval.go`), on the
`Evaluation` topic and `GET /v1/job/:id/evaluations`."""

from __future__ import annotations

from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import TWO_NODES, ClusterFactory
from .helpers import StreamReader, job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def _constrained(job_id: str, attribute: str, operator: str, value: str, **options: Any) -> str:
    constraint = (f'constraint {{\n    attribute = "{attribute}"\n    operator = "{operator}"\n'
                  f'    value = "{value}"\n  }}\n  group "main" {{')
    return jobspec(job_id, duration=3600, **options).replace('group "main" {', constraint, 1)


def _evaluations(cluster: DevCluster, job_id: str) -> list[dict[str, Any]]:
    return requests.get(f"{cluster.url}/v1/job/{job_id}/evaluations", timeout=5).json()


def _failed(cluster: DevCluster, job_id: str) -> dict[str, Any]:
    """The FailedTGAllocs metric of the job's blocked evaluation."""
    (blocked,) = [e for e in _evaluations(cluster, job_id) if e["Status"] == "blocked"]
    metric: dict[str, Any] = blocked["FailedTGAllocs"]["main"]
    return metric


@pytest.mark.parametrize(("attribute", "operator", "value", "placed"), [
    pytest.param("${attr.no.such.thing}", "=", "x", False, id="unknown-target-equal"),
    pytest.param("${attr.no.such.thing}", "!=", "x", True, id="unknown-target-not-equal"),
    pytest.param("${attr.no.such.thing}", "is_set", "", False, id="unknown-target-is-set"),
    pytest.param("${attr.no.such.thing}", "is_not_set", "", True, id="unknown-target-is-not-set"),
    pytest.param("${attr.no.such.thing}", "regexp", ".*", False, id="unknown-target-regexp"),
    pytest.param("${node.nope}", "=", "", False, id="unknown-interpolation"),
    pytest.param("${attr.kernel.name}", "like", "linux", False, id="unknown-operator"),
    pytest.param("${attr.cpu.numcores}", ">=", "2", True, id="order-integers"),
    pytest.param("${attr.cpu.numcores}", ">", "100", False, id="order-integers-refused"),
    pytest.param("${attr.nomad.version}", "version", ">= 1.10, < 3.0", True, id="version"),
    pytest.param("${attr.nomad.version}", "version", "~> 1.10", False, id="version-pessimistic"),
    pytest.param("${attr.nomad.version}", "semver", "< 1.0.0", False, id="semver"),
    pytest.param("${attr.kernel.name}", "set_contains_any", "darwin,linux", True, id="set-contains-any"),
])
def test_node_constraints_are_checked_as_nomad_checks_them(seed: DevCluster, client: nomad.Nomad, attribute: str,
                                                           operator: str, value: str, placed: bool) -> None:
    submit(client, _constrained("c", attribute, operator, value))
    if placed:
        wait_until(lambda: job_allocs(seed.audit(), "c"))
        return
    assert job_allocs(seed.audit(), "c") == []
    metric = _failed(seed, "c")
    assert metric["ConstraintFiltered"] == {f"{attribute} {operator} {value}": 1}
    assert (metric["NodesEvaluated"], metric["NodesFiltered"], metric["NodesAvailable"]) == (1, 1, {"dc1": 1})


def test_refusal_reaches_the_evaluation_topic(seed: DevCluster, client: nomad.Nomad) -> None:
    reader = StreamReader(seed.url, [("topic", "Evaluation:refused")])
    reply = submit(client, _constrained("refused", "${meta.rack}", "=", "r1"))
    completed = reader.wait_for(lambda e: e["Payload"]["Evaluation"]["Status"] == "complete"
                                and e["Payload"]["Evaluation"]["FailedTGAllocs"] is not None)
    evaluation = completed["Payload"]["Evaluation"]
    assert evaluation["ID"] == reply["EvalID"] and completed["FilterKeys"] == ["refused", ""]
    assert evaluation["TriggeredBy"] == "job-register" and evaluation["QueuedAllocations"] == {"main": 1}
    blocked = reader.wait_for(lambda e: e["Payload"]["Evaluation"]["Status"] == "blocked")["Payload"]["Evaluation"]
    assert (blocked["PreviousEval"], evaluation["BlockedEval"]) == (evaluation["ID"], blocked["ID"])
    assert blocked["TriggeredBy"] == "queued-allocs"
    assert blocked["FailedTGAllocs"]["main"]["ConstraintFiltered"] == {"${meta.rack} = r1": 1}
    assert client.job.get_job("refused")["Status"] == "pending"
    listed = requests.get(f"{seed.url}/v1/evaluations", timeout=5).json()
    assert {e["ID"] for e in listed} >= {evaluation["ID"], blocked["ID"]}
    reader.close()


def test_an_unhealthy_driver_makes_the_node_infeasible(make_cluster: ClusterFactory) -> None:
    nodes = [dict(TWO_NODES["nodes"][0], drivers={"docker": False, "exec": True}), *TWO_NODES["nodes"][1:]]
    cluster = make_cluster({**TWO_NODES, "nodes": nodes})
    client = nomad.Nomad(address=cluster.url, timeout=5)
    ids = cluster.node_ids()
    node = client.node.get_node(ids["n1"])
    assert node["Drivers"]["docker"]["Healthy"] is False and "driver.docker" not in node["Attributes"]
    assert "raw_exec" not in node["Drivers"]
    submit(client, jobspec("docker-on-n1", node=ids["n1"], duration=3600))
    assert job_allocs(cluster.audit(), "docker-on-n1") == []
    assert _failed(cluster, "docker-on-n1")["ConstraintFiltered"] == {
        "missing drivers": 1, f"${{node.unique.id}} = {ids['n1']}": 1}  # n3 is in dc2: not evaluated
    exec_job = jobspec("exec-on-n1", node=ids["n1"], duration=3600).replace('driver = "docker"', 'driver = "exec"')
    submit(client, exec_job)
    wait_until(lambda: job_allocs(cluster.audit(), "exec-on-n1"))


def test_distinct_hosts_keeps_allocations_apart(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    submit(client, _constrained("spread", "", "distinct_hosts", "true", count=3))
    placed = wait_until(lambda: len(job_allocs(cluster.audit(), "spread")) == 2 and job_allocs(cluster.audit(),
                                                                                               "spread"))
    assert len({a["node_id"] for a in placed}) == 2
    metric = _failed(cluster, "spread")
    assert metric["ConstraintFiltered"] == {"distinct_hosts": 2} and metric["NodesEvaluated"] == 2


def test_exhaustion_is_a_dimension_and_the_blocked_eval_completes_later(seed: DevCluster, client: nomad.Nomad) -> None:
    submit(client, jobspec("hog", cpu=100000, duration=3600))
    submit(client, jobspec("late", cpu=60000, duration=0.001))
    metric = _failed(seed, "late")
    assert metric["DimensionExhausted"] == {"cpu": 1} and metric["NodesExhausted"] == 1
    (blocked,) = [e for e in _evaluations(seed, "late") if e["Status"] == "blocked"]
    client.job.deregister_job("hog")
    wait_until(lambda: job_allocs(seed.audit(), "late"))
    settled = requests.get(f"{seed.url}/v1/evaluation/{blocked['ID']}", timeout=5).json()
    assert settled["Status"] == "complete" and settled["ModifyIndex"] > blocked["ModifyIndex"]


def test_unknown_device_attributes_are_not_found(seed: DevCluster, client: nomad.Nomad) -> None:
    submit(client, jobspec("dev-attr", gpus=1, duration=3600,
                           device_constraints=[("${device.attr.no_such}", "=", "x")]))
    assert job_allocs(seed.audit(), "dev-attr") == []
    assert _failed(seed, "dev-attr")["ConstraintFiltered"] == {"missing devices": 1}
    submit(client, jobspec("dev-power", gpus=1, duration=3600,
                           device_constraints=[("${device.attr.power}", ">=", "50 W")]))
    wait_until(lambda: job_allocs(seed.audit(), "dev-power"))


def test_a_host_volume_the_node_lacks_makes_it_infeasible(make_cluster: ClusterFactory) -> None:
    """HostVolumeChecker (`scheduler/feasible/feasible.go`, v2.0.5): the service's own job keeps its queue on
    a host volume, and only a node whose client declares that volume can run it."""
    from nomad_gpu.render import JobRenderer, ServiceJobSettings

    hcl = JobRenderer().render_service_job(ServiceJobSettings(image="nomad-gpu:1", job_id="svc"))
    without = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=without.url, timeout=5)
    client.jobs.register_job({"Job": client.jobs.parse(hcl), "Submission": {"Source": hcl, "Format": "hcl2"}})
    assert job_allocs(without.audit(), "svc") == []
    (blocked,) = [e for e in _evaluations(without, "svc") if e["Status"] == "blocked"]
    assert blocked["FailedTGAllocs"]["nomad-gpu"]["ConstraintFiltered"]["missing compatible host volumes"] >= 1
    nodes = [dict(TWO_NODES["nodes"][0], host_volumes=["nomad-gpu"]), *TWO_NODES["nodes"][1:]]
    with_volume = make_cluster({**TWO_NODES, "nodes": nodes})
    client = nomad.Nomad(address=with_volume.url, timeout=5)
    node = client.node.get_node(with_volume.node_ids()["n1"])
    assert node["HostVolumes"]["nomad-gpu"]["Name"] == "nomad-gpu"
    client.jobs.register_job({"Job": client.jobs.parse(hcl), "Submission": {"Source": hcl, "Format": "hcl2"}})
    wait_until(lambda: job_allocs(with_volume.audit(), "svc"))
    assert {a["node_id"] for a in job_allocs(with_volume.audit(), "svc")} == {with_volume.node_ids()["n1"]}
