"""Every waiting entry says why it waits, and the queue says in which order the cycle takes them
(issue 40, item 1): sweep trials beyond `max_parallel`, `after:` dependencies, holds, and the entries the
cycle decided on; `position` is the cycle's own order, null where the cycle does not consider the entry."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, alloc, gpu_node, service
from starlette.testclient import TestClient

from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore


def job(name: str, *after: str, gpus: int = 1, priority: int = 50, team: str = "t") -> dict[str, Any]:
    return {"name": name, "team": team, "priority": priority, "task": {"image": "b"}, "gpu": {"count": gpus},
            "after": list(after)}


def run(s: SchedulerService, ex: ManualExecutor) -> None:
    s.run_cycle()
    ex.run_all()


def finish(s: SchedulerService, entry_id: str) -> None:
    e = s.store.get(entry_id)
    devices = tuple(i for p in e.placements for i in p["instance_ids"])
    s.on_alloc(alloc(e.nomad_job_id, "running", devices=devices))
    s.on_alloc(alloc(e.nomad_job_id, "complete", devices=devices))


def listed(client: TestClient) -> dict[str, dict[str, Any]]:
    r = client.get("/v1/jobs", params={"state": "queued"})
    assert r.status_code == 200, r.text
    return {e["id"]: e for e in r.json()["entries"]}


@pytest.fixture
def svc() -> tuple[SchedulerService, ManualExecutor]:
    ex = ManualExecutor()
    s = service(SqliteStore(), FakeNomad(), Clock(), ex)
    s.on_resync([gpu_node("n1", 4)], [])
    return s, ex


def test_every_waiting_entry_of_a_throttled_sweep_with_dependencies_and_holds_says_why(
        svc: tuple[SchedulerService, ManualExecutor]) -> None:
    s, ex = svc
    client = TestClient(create_app(s))
    big = s.submit(job("big", gpus=4))[0].id  # takes the node: everything else waits
    trials = s.submit({"kind": "sweep", "name": "lr-hpo", "team": "t", "task": {"image": "b"}, "gpu": {"count": 1},
                       "sweep": {"mode": "random", "trials": 200, "max_parallel": 16,
                                 "parameters": {"lr": {"min": 0.0001, "max": 0.1, "log": True}}}})
    sweep_id = trials[0].sweep
    assert len(trials) == 200 and sweep_id
    after = s.submit(job("eval", big))[0].id
    held = s.submit(job("held"))[0].id
    s.hold(held)
    plain = s.submit(job("plain"))[0].id
    run(s, ex)
    assert s.store.get(big).state.value == "admitted"

    entries = listed(client)
    assert len(entries) == 203
    assert all(e["reason"] for e in entries.values()), [i for i, e in entries.items() if not e["reason"]]
    throttled = [e for e in entries.values() if e["sweep"] == sweep_id and "max_parallel" in e["reason"]]
    assert len(throttled) == 200 - 16
    assert {e["reason"] for e in throttled} == {f"sweep {sweep_id} at max_parallel 16: 0 running, 16 queued ahead"}
    assert entries[after]["reason"].startswith(f"after: waiting for {big} (")  # as the cycle began
    assert entries[held]["reason"] == "held by user"

    # position: the cycle's order over what it considered; null for held, dependent and throttled entries
    for e in [*throttled, entries[after], entries[held]]:
        assert e["position"] is None, e
    considered = sorted((e for e in entries.values() if e["position"] is not None), key=lambda e: e["position"])
    assert [e["position"] for e in considered] == list(range(1, 18))  # 16 trials and `plain`
    assert considered[-1]["id"] == plain  # the youngest of one team and priority comes last
    one = client.get(f"/v1/jobs/{plain}").json()
    assert one["position"] == 17 and one["reason"]


def test_a_held_entry_says_so_after_cycles_and_loses_its_hold_reason_on_release(
        svc: tuple[SchedulerService, ManualExecutor]) -> None:
    s, ex = svc
    s.submit(job("big", gpus=4))
    held = s.submit(job("held"))[0].id
    s.hold(held)
    for _ in range(2):
        run(s, ex)
        assert s.store.get(held).reason == "held by user"
    s.release(held)
    run(s, ex)
    assert s.store.get(held).reason and "held" not in s.store.get(held).reason


def test_an_entry_the_cycle_never_saw_says_why_it_has_not_been_decided() -> None:
    ex = ManualExecutor()
    s = service(SqliteStore(), FakeNomad(), Clock(), ex)  # no resync yet: Nomad's state is not known
    client = TestClient(create_app(s))
    entry = s.submit(job("early"))[0].id
    got = client.get(f"/v1/jobs/{entry}").json()
    assert got["reason"] and "Nomad" in got["reason"] and got["position"] is None


def test_positions_follow_the_order_the_cycle_admits_in(svc: tuple[SchedulerService, ManualExecutor]) -> None:
    s, ex = svc
    client = TestClient(create_app(s))
    s.submit(job("big", gpus=4))
    run(s, ex)
    ids = [s.submit(job(f"j{i}", gpus=4, priority=p))[0].id for i, p in enumerate([50, 70, 50, 90, 60])]
    running = s.store.list(None)[0].id
    run(s, ex)
    before = {i: e["position"] for i, e in listed(client).items()}
    assert sorted(before.values()) == [1, 2, 3, 4, 5]
    admitted_in: list[str] = []
    while before:
        finish(s, running)  # one finishes, one is admitted: the one the queue said was first
        run(s, ex)
        now = listed(client)
        running = next(i for i in before if i not in now)
        admitted_in.append(running)
        assert before[running] == 1
        assert {i: e["position"] for i, e in now.items()} == {i: p - 1 for i, p in before.items() if i != running}
        before = {i: e["position"] for i, e in now.items()}
    assert admitted_in == [ids[3], ids[1], ids[4], ids[0], ids[2]]  # priority, then age


def test_etas_without_runtime_come_from_the_class_default_and_say_so(
        svc: tuple[SchedulerService, ManualExecutor]) -> None:
    s, ex = svc
    client = TestClient(create_app(s))
    first = s.submit({**job("train", gpus=4), "class": "training"})[0].id
    run(s, ex)
    s.on_alloc(alloc(s.store.get(first).nomad_job_id, "running",
                     devices=tuple(i for p in s.store.get(first).placements for i in p["instance_ids"])))
    second = s.submit({**job("next", gpus=4), "runtime": "10m"})[0].id
    got = {e["id"]: e for e in client.get("/v1/jobs", params={"eta": "true"}).json()["entries"]}
    now = s.clock()
    assert got[first]["state"] == "running"
    assert (got[first]["eta"], got[first]["eta_basis"]) == (now + 7200, "estimate from class training default")
    assert (got[second]["eta"], got[second]["eta_basis"]) == (now + 7200, "estimate from class training default")
