"""The chaos test (the faults issue): jobs of mixed shapes flow through `nomad-gpu serve` while the
service is SIGKILLed and restarted on the same database, register replies are lost after Nomad applied
them, event streams are cut, Nomad is unreachable for a while, its servers lose their leader, GPUs turn
unhealthy for a while, a node is cut off from the servers while its tasks run on, and finished jobs are
garbage-collected while the service is down. Judged by the
dev cluster's audit alone.
The long run is benchmarks/chaos.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nomad_gpu.devcluster.chaos import ChaosConfig, run_chaos

CLUSTER = Path(__file__).resolve().parents[2] / "clusters" / "mixed-fleet.yaml"


@pytest.mark.e2e
def test_kills_lost_replies_cuts_and_an_outage_lose_nothing_and_run_nothing_twice(tmp_path: Path) -> None:
    cfg = ChaosConfig(cluster=CLUSTER, jobs=60, kills=5, lost_replies=4, stream_cuts=3, outage_s=5.0, elections=1,
                      election_s=8.0, unhealthy_gpus=2, unhealthy_s=5.0, partitions=1, partition_s=60.0, speed=60.0,
                      duration_s=(30.0, 120.0), submit_over_s=15.0, seed=7, timeout_s=240.0, workdir=tmp_path)
    report = run_chaos(cfg)
    log = (tmp_path / "service.log").read_text(encoding="utf-8", errors="replace")[-3000:]
    assert report["kills"] == 5 and report["acknowledged"] == 60, report
    assert report["settled"], f"the queue did not settle in {cfg.timeout_s:g} s (a loaded machine?): {report}"
    assert report["lost"] == [], log
    assert report["run_twice"] == [], log
    assert report["double_bookings"] == 0, log
    assert report["left_running"] == [] and report["unknown_jobs"] == [], log
    # a cancel during an election cannot reach Nomad before a leader is back
    assert report["cancels_never_stopped"] == 0 and report["cancel_stop_s_max"] < 10 + cfg.election_s, report
    assert report["refused_requests_max_per_s"] < 10, report
    assert report["replies_lost"] >= 1, "the fault was never exercised"
    assert report["faults"]["election"] == 1, report
    assert report["faults"]["unhealthy_gpu"] == 2 and report["placed_on_unhealthy"] == 0, report
    assert report["faults"]["partition"] == 1 and report["live_tenants_max"] <= 1, report
