"""`/v1/event/stream` read by a real client line by line: framing, heartbeats, resume, buffer, drops."""

from __future__ import annotations

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import ClusterFactory
from .helpers import StreamReader, alloc_events, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def test_alloc_lifecycle_on_the_stream(seed: DevCluster, client: nomad.Nomad) -> None:
    reader = StreamReader(seed.url, [("topic", "Allocation"), ("topic", "Job")])
    assert reader.status == 200
    assert reader.headers["content-type"].startswith("application/json")
    assert reader.headers["cache-control"] == "no-cache"
    submit(client, jobspec("life", gpus=1, duration=0.01))
    reader.wait_for(lambda e: e["Type"] == "AllocationUpdated"
                    and e["Payload"]["Allocation"]["ClientStatus"] == "complete")
    assert alloc_events(reader, "life") == [("PlanResult", "pending"), ("AllocationUpdated", "running"),
                                            ("AllocationUpdated", "complete")]
    assert reader.lines[0][1] == b"{}"  # heartbeat on connect
    frames = reader.frames
    assert [f["Index"] for f in frames] == sorted({f["Index"] for f in frames})
    for frame in frames:
        assert all(event["Index"] == frame["Index"] for event in frame["Events"])
    plan = next(e for e in reader.events if e["Type"] == "PlanResult")
    assert set(plan) == {"Topic", "Type", "Key", "Namespace", "FilterKeys", "Index", "Payload"}
    assert plan["Payload"]["Allocation"]["Job"] is None
    assert plan["FilterKeys"] == ["life", ""] and plan["Key"] == plan["Payload"]["Allocation"]["ID"]
    assert plan["Payload"]["Allocation"]["AllocatedResources"]["Tasks"]["work"]["Devices"][0]["DeviceIDs"]
    registered = next(e for e in reader.events if e["Topic"] == "Job")
    assert (registered["Type"], registered["Key"], registered["FilterKeys"]) == ("JobRegistered", "life", None)
    reader.close()


def test_frames_are_flushed_one_by_one(seed: DevCluster, client: nomad.Nomad) -> None:
    reader = StreamReader(seed.url, [("topic", "Allocation")])
    submit(client, jobspec("flush", gpus=1, duration=3600))
    # Both frames arrive while the task is still running: nothing waits for a later write.
    reader.wait_for(lambda e: e["Payload"]["Allocation"]["ClientStatus"] == "running")
    assert alloc_events(reader, "flush") == [("PlanResult", "pending"), ("AllocationUpdated", "running")]
    (stub,) = client.job.get_allocations("flush")
    client.allocation.stop_allocation(stub["ID"])
    reader.wait_for(lambda e: e["Payload"]["Allocation"]["ClientStatus"] == "complete")
    # The stop migrates the allocation: a replacement follows, batch included (v2.0.5 reconciler). The client
    # kills the task (`Killing`, still running) and it ends after its kill_timeout (kills.py).
    own = [(e["Type"], e["Payload"]["Allocation"]["ClientStatus"]) for e in reader.events
           if e["Topic"] == "Allocation" and e["Key"] == stub["ID"]]
    assert own[2:6] == [("AllocationUpdateDesiredStatus", "running"), ("PlanResult", "running"),
                        ("AllocationUpdated", "running"), ("AllocationUpdated", "complete")]
    stop_plan = [e for e in reader.events if e["Type"] == "PlanResult" and e["Key"] == stub["ID"]][-1][
        "Payload"]["Allocation"]
    assert stop_plan["DesiredStatus"] == "stop" and stop_plan["DesiredTransition"]["Migrate"] is True
    reader.close()


def test_heartbeats(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(heartbeat_s=0.02)
    reader = StreamReader(cluster.url, [("topic", "Job")])
    wait_until(lambda: reader.heartbeats >= 3, what="three heartbeats")
    assert reader.frames == []
    reader.close()


def _fill(cluster: DevCluster, jobs: int) -> None:
    """Register long jobs and wait until they run, so no more frames follow."""
    client = nomad.Nomad(address=cluster.url)
    for i in range(jobs):
        submit(client, jobspec(f"fill-{i}", duration=3600))
    wait_until(lambda: all(a["client_status"] == "running" for a in cluster.audit()["allocations"]))


def test_index_is_inclusive_and_zero_replays_the_buffer(seed: DevCluster) -> None:
    _fill(seed, 3)
    everything = StreamReader(seed.url)
    wait_until(lambda: everything.frames and everything.frames[-1]["Index"] == seed.audit()["index"])
    indexes = [f["Index"] for f in everything.frames]
    assert indexes[0] == 1  # the NodeRegistration at start-up is still buffered
    assert everything.events[0]["Type"] == "NodeRegistration" and everything.events[0]["Namespace"] == ""
    middle = indexes[len(indexes) // 2]
    resumed = StreamReader(seed.url, [("index", str(middle))])
    wait_until(lambda: resumed.frames and resumed.frames[-1]["Index"] == indexes[-1])
    assert [f["Index"] for f in resumed.frames] == [i for i in indexes if i >= middle]
    future = StreamReader(seed.url, [("index", str(indexes[-1] + 100))])
    wait_until(lambda: future.frames)
    assert [f["Index"] for f in future.frames] == [indexes[-1]]  # a future index replays the newest frame
    for reader in (everything, resumed, future):
        reader.close()


def test_index_older_than_the_buffer_starts_at_the_oldest_frame(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(event_buffer=4)
    _fill(cluster, 4)
    newest = cluster.audit()["index"]
    reader = StreamReader(cluster.url, [("index", "1")])
    wait_until(lambda: reader.frames and reader.frames[-1]["Index"] == newest)
    assert reader.status == 200
    assert [f["Index"] for f in reader.frames] == list(range(newest - 3, newest + 1))
    reader.close()


def test_topic_keys_match_key_or_filter_keys(seed: DevCluster, client: nomad.Nomad) -> None:
    reader = StreamReader(seed.url, [("topic", "Allocation:keep"), ("topic", "Job:keep")])
    submit(client, jobspec("skip", duration=0.001))
    submit(client, jobspec("keep", duration=0.001))
    reader.wait_for(lambda e: e["Topic"] == "Allocation" and e["Payload"]["Allocation"]["ClientStatus"] == "complete")
    assert {e["Payload"]["Allocation"]["JobID"] for e in reader.events if e["Topic"] == "Allocation"} == {"keep"}
    assert {e["Key"] for e in reader.events if e["Topic"] == "Job"} == {"keep"}
    reader.close()


@pytest.mark.parametrize(("params", "text"), [
    pytest.param({"topic": "Allocation:a:b"}, "Invalid topic query: ", id="two-colons"),
    pytest.param({"index": "abc"}, "Unable to parse index: ", id="bad-index"),
])
def test_bad_stream_parameters_are_400(seed: DevCluster, params: dict[str, str], text: str) -> None:
    reply = requests.get(f"{seed.url}/v1/event/stream", params=params, timeout=5)
    assert reply.status_code == 400 and reply.text.startswith(text)


def test_drop_streams_ends_every_connection(seed: DevCluster) -> None:
    readers = [StreamReader(seed.url, [("topic", "Node")]) for _ in range(2)]
    wait_until(lambda: all(r.heartbeats for r in readers))
    assert seed.drop_streams() == 2
    for reader in readers:
        assert reader.ended.wait(5)
    again = StreamReader(seed.url, [("topic", "Node")])
    wait_until(lambda: again.heartbeats)
    assert requests.post(f"{seed.url}/_dev/streams/drop", timeout=5).json() == {"dropped": 1}
    assert again.ended.wait(5)


def test_job_deregister_events(seed: DevCluster, client: nomad.Nomad) -> None:
    reader = StreamReader(seed.url, [("topic", "Job")])
    submit(client, jobspec("gone", duration=3600))
    client.job.deregister_job("gone", purge=True)
    event = reader.wait_for(lambda e: e["Type"] == "JobDeregistered")
    assert event["Payload"]["Job"]["Stop"] is True and event["Payload"]["Deleted"] is True
    reader.close()
