"""`GET /v1/client/fs/logs/:alloc_id`: a few lines per task, Nomad's parameters, errors and framing."""

from __future__ import annotations

import base64
import json
from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.logs import STEPS

from .conftest import ClusterFactory
from .helpers import job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def _logs(cluster: DevCluster, alloc_id: str, **params: str) -> requests.Response:
    return requests.get(f"{cluster.url}/v1/client/fs/logs/{alloc_id}", params=params, timeout=5)


def _alloc(cluster: DevCluster, job_id: str, status: str) -> dict[str, Any]:
    wait_until(lambda: [a["client_status"] for a in job_allocs(cluster.audit(), job_id)] == [status], 10,
               f"{job_id} {status}")
    (alloc,) = job_allocs(cluster.audit(), job_id)
    return alloc


def test_a_finished_task_wrote_its_devices_its_steps_and_its_exit(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(speed=100.0)
    submit(nomad.Nomad(address=cluster.url), jobspec("ok", gpus=2, duration=10))
    alloc = _alloc(cluster, "ok", "complete")
    r = _logs(cluster, alloc["alloc_id"], task="work", type="stdout", plain="true")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    lines = r.text.splitlines()
    assert lines[0].startswith("work: started on ") and alloc["alloc_id"][:8] in lines[0]
    assert lines[1] == f"work: NVIDIA_VISIBLE_DEVICES={','.join(alloc['device_ids'])}"
    assert [ln for ln in lines if "step" in ln] == [f"work: step {k}/{STEPS} ({25 * k}%)" for k in range(1, STEPS)]
    assert lines[-1] == "work: done, exit code 0"
    assert _logs(cluster, alloc["alloc_id"], task="work", type="stderr", plain="true").text == ""
    # an offset counts from the start, or back from the end; it stops at either end
    assert _logs(cluster, alloc["alloc_id"], task="work", type="stdout", plain="true", offset="5").text == r.text[5:]
    tail = _logs(cluster, alloc["alloc_id"], task="work", type="stdout", plain="true", origin="end", offset="24")
    assert tail.text == r.text[-24:]
    assert _logs(cluster, alloc["alloc_id"], task="work", type="stdout", plain="true", offset="99999").text == ""
    assert _logs(cluster, alloc["alloc_id"], task="work", type="stdout", plain="true", origin="end",
                 offset="99999").text == r.text


def test_a_failed_task_says_so_on_stderr_and_json_frames_carry_base64(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(speed=100.0)
    submit(nomad.Nomad(address=cluster.url), jobspec("bad", gpus=1, duration=5, fail=True))
    alloc = _alloc(cluster, "bad", "failed")
    r = _logs(cluster, alloc["alloc_id"], task="work", type="stderr")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    frame = json.loads(r.text)
    assert frame["File"] == "alloc/logs/work.stderr.0"
    assert base64.b64decode(frame["Data"]).decode() == "work: error: the task failed, exit code 1\n"
    out = _logs(cluster, alloc["alloc_id"], task="work", type="stdout", plain="true").text
    assert "done" not in out


def test_parameters_and_errors_as_nomad_words_them(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(speed=1.0)
    client = nomad.Nomad(address=cluster.url)
    submit(client, jobspec("long", gpus=1, duration=3600))
    alloc = _alloc(cluster, "long", "running")
    alloc_id = alloc["alloc_id"]
    cases = [
        ({"type": "stdout"}, 400, "must provide task name"),
        ({"task": "work"}, 400, "must provide log type (stdout/stderr)"),
        ({"task": "work", "type": "both"}, 400, "must provide log type (stdout/stderr)"),
        ({"task": "work", "type": "stdout", "origin": "middle"}, 400, "origin must be start or end"),
        ({"task": "work", "type": "stdout", "plain": "yes"}, 400, "failed to parse plain field to boolean"),
        ({"task": "work", "type": "stdout", "follow": "maybe"}, 400, "failed to parse follow field to boolean"),
        ({"task": "work", "type": "stdout", "offset": "x"}, 400, "error parsing offset"),
        ({"task": "other", "type": "stdout"}, 400, 'unknown task name "other"'),
    ]
    for params, status, text in cases:
        r = _logs(cluster, alloc_id, **params)
        assert (r.status_code, r.headers["content-type"].split(";")[0]) == (status, "text/plain"), params
        assert text in r.text, (params, r.text)
    r = _logs(cluster, "0b3f1c3e-1111-4222-8333-944455556666", task="work", type="stdout")
    assert r.status_code == 404 and r.text == 'Unknown allocation "0b3f1c3e-1111-4222-8333-944455556666"'
    running = _logs(cluster, alloc_id, task="work", type="stdout", plain="true").text
    assert running.count("\n") == 2, "a running task has written its first lines only"


def test_a_task_that_has_not_started_has_no_logs(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(speed=1.0)
    submit(nomad.Nomad(address=cluster.url), jobspec("later", gpus=1, duration=3600))
    alloc_id = _alloc(cluster, "later", "running")["alloc_id"]
    record = cluster.state.allocs[alloc_id]
    with cluster.state.lock:  # as it was between placement and its start (the start follows at once here)
        started, record.started_at = record.started_at, None
    try:
        r = _logs(cluster, alloc_id, task="work", type="stdout")
    finally:
        record.started_at = started
    assert r.status_code == 404 and r.text == 'task "work" not started yet. No logs available'


def test_follow_sends_what_the_task_writes_next(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(speed=20.0)
    submit(nomad.Nomad(address=cluster.url), jobspec("watch", gpus=1, duration=40))
    alloc = _alloc(cluster, "watch", "running")
    seen = b""
    with requests.get(f"{cluster.url}/v1/client/fs/logs/{alloc['alloc_id']}",
                      params={"task": "work", "type": "stdout", "plain": "true", "follow": "true"},
                      stream=True, timeout=10) as r:
        for chunk in r.iter_content(chunk_size=None):
            seen += chunk
            if b"done, exit code 0" in seen:
                break
    assert seen.decode().splitlines()[-1] == "work: done, exit code 0"
    assert b"step 2/4" in seen
