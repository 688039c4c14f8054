"""Unit tables for the small pieces: unit comparison, device name matching, the ledger's refusal,
the timer heap, and the event broker's topic parsing and resume."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from nomad_gpu.devcluster.events import Event, EventBroker, StreamRequestError, parse_index, parse_topics
from nomad_gpu.devcluster.inventory import DeviceGroup, DeviceInstance
from nomad_gpu.devcluster.ledger import DeviceLedger, DoubleBookingError
from nomad_gpu.devcluster.placement import name_matches
from nomad_gpu.devcluster.runner import TimerHeap
from nomad_gpu.devcluster.units import compare_quantities

A100 = DeviceGroup("nvidia", "gpu", "NVIDIA A100-SXM4-80GB", 81920, (DeviceInstance("GPU-1", "bus"),))
SHARED = DeviceGroup("nomad-gpu", "shared-gpu", "NVIDIA L40S", 46068, (DeviceInstance("GPU-2", "bus"),))


@pytest.mark.parametrize(("value", "unit", "operand", "wanted", "expected"), [
    pytest.param(81920, "MiB", ">=", "40 GiB", True, id="80GiB>=40GiB"),
    pytest.param(10240, "MiB", ">=", "40 GiB", False, id="10GiB<40GiB"),
    pytest.param(40960, "MiB", ">=", "40 GiB", True, id="equal"),
    pytest.param(40960, "MiB", "<", "40 GB", False, id="GiB-vs-GB"),
    pytest.param(81920, "MiB", ">", "1 GHz", False, id="other-base-unit"),
    pytest.param(81920, "MiB", "=", "81920", True, id="no-unit"),
    pytest.param(81920, "MiB", ">=", "lots", False, id="not-a-quantity"),
])
def test_compare_quantities(value: int, unit: str, operand: str, wanted: str, expected: bool) -> None:
    assert compare_quantities(value, unit, operand, wanted) is expected


@pytest.mark.parametrize(("request_name", "group", "expected"), [
    pytest.param("gpu", A100, True, id="type"),
    pytest.param("nvidia/gpu", A100, True, id="vendor-type"),
    pytest.param("nvidia/gpu/NVIDIA A100-SXM4-80GB", A100, True, id="exact-name"),
    pytest.param("nvidia/gpu/NVIDIA A100", A100, False, id="name-prefix-is-not-a-match"),
    pytest.param("amd/gpu", A100, False, id="other-vendor"),
    pytest.param("gpu", SHARED, False, id="shared-is-not-gpu"),
    pytest.param("nomad-gpu/shared-gpu", SHARED, True, id="shared-by-vendor"),
])
def test_device_name_matching(request_name: str, group: DeviceGroup, expected: bool) -> None:
    assert name_matches(request_name, group) is expected


def test_ledger_refuses_to_overwrite_and_releases() -> None:
    ledger = DeviceLedger()
    ledger.hold("a1", ["GPU-1", "GPU-2"])
    with pytest.raises(DoubleBookingError):
        ledger.hold("a2", ["GPU-2", "GPU-3"])
    assert ledger.held() == {"GPU-1": "a1", "GPU-2": "a1"}  # all or nothing
    assert ledger.release("a1") == ("GPU-1", "GPU-2")
    ledger.hold("a2", ["GPU-2"])
    assert ledger.holder("GPU-2") == "a2"


def test_ledger_counts_share_oversubscription_per_placement() -> None:
    ledger = DeviceLedger()
    assert ledger.add_share("a", "GPU-9", 600) is False
    assert ledger.add_share("b", "GPU-9", 400) is False  # exactly 1000 is fine
    assert ledger.add_share("c", "GPU-9", 1) is True
    ledger.release("c")
    assert ledger.share_sum("GPU-9") == 1000 and ledger.share_oversubscriptions == 1


def test_timer_heap_runs_in_deadline_order() -> None:
    clock = [100.0]
    timers = TimerHeap(clock=lambda: clock[0])
    ran: list[str] = []
    done = threading.Event()
    timers.call_at(100.0, lambda: ran.append("due"))
    timers.call_at(99.0, lambda: ran.append("overdue"))
    timers.call_at(100.0, done.set)
    timers.call_at(500.0, lambda: ran.append("future"))
    timers.start()
    try:
        assert done.wait(5)
        assert ran == ["overdue", "due"]
        assert timers.pending() == 1
    finally:
        timers.stop()


def test_timer_heap_survives_a_failing_callback() -> None:
    timers = TimerHeap()
    done = threading.Event()

    def boom() -> None:
        raise RuntimeError("boom")

    timers.start()
    try:
        timers.call_soon(boom)
        timers.call_soon(done.set)
        assert done.wait(5)
    finally:
        timers.stop()


def test_topic_and_index_parsing() -> None:
    assert parse_topics([]) == {"*": frozenset({"*"})}
    assert parse_topics(["Allocation", "Job:j1", "Job:j2"]) == {"Allocation": frozenset({"*"}),
                                                                "Job": frozenset({"j1", "j2"})}
    with pytest.raises(StreamRequestError, match="^Invalid topic query: "):
        parse_topics(["Job:a:b"])
    assert parse_index(None) == 0 and parse_index("42") == 42
    with pytest.raises(StreamRequestError, match="^Unable to parse index: "):
        parse_index("-1x")


def _event(index: int, job: str) -> Event:
    return Event("Allocation", "PlanResult", f"alloc-{index}", "default", (job, ""), index, {})


def test_broker_backlog_filters_and_resumes() -> None:
    loop = asyncio.new_event_loop()
    try:
        broker = EventBroker(buffer_size=3)
        for index in range(1, 6):
            broker.publish(index, [_event(index, "even" if index % 2 == 0 else "odd")])
        _, backlog = broker.subscribe({"Allocation": frozenset({"odd"})}, "default", 0, loop)
        assert [json.loads(frame)["Index"] for frame in backlog] == [3, 5]  # 1 fell out; 4 is "even"
        _, backlog = broker.subscribe({"Allocation": frozenset({"*"})}, "default", 4, loop)
        assert [json.loads(frame)["Index"] for frame in backlog] == [4, 5]  # inclusive
        _, backlog = broker.subscribe({"*": frozenset({"*"})}, "other-namespace", 0, loop)
        assert backlog == []  # namespaced events do not cross namespaces
        assert broker.oldest_index() == 3 and broker.subscriber_count == 3
        assert broker.drop_all() == 3 and broker.subscriber_count == 0
    finally:
        loop.close()
