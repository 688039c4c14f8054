"""Every waiting entry says why, against the dev cluster as a user meets it (issue 40, item 1): a 200-trial
sweep with `max_parallel`, an entry waiting on `after:`, a held one, and the jobs the cycle decided on; the
positions the API gives are the cycle's order over the entries it considered, 1 to n."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from harness import entries, spec, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster


@pytest.mark.e2e
def test_a_throttled_sweep_a_dependency_and_a_hold_each_say_why(tmp_path: Path) -> None:
    one_node = {"name": "four", "nodes": [{"name": "n1", "gpus": [
        {"model": "NVIDIA A100-SXM4-80GB", "count": 4, "memory_mib": 81920}]}]}
    with DevCluster(one_node, speed=1.0, heartbeat_s=1.0) as dc:
        runtime = start_service(dc.url, tmp_path / "q.db")
        try:
            blocker = submit(runtime, spec("blocker", gpus=4, duration_s=600))[0]["id"]
            trials = submit(runtime, spec("lr-hpo", duration_s=600) + "kind: sweep\nsweep: {mode: random, "
                            "trials: 200, max_parallel: 16, parameters: {lr: {min: 0.0001, max: 0.1, log: true}}}\n")
            after = submit(runtime, spec("evaluate", extra=f"after: [{blocker}]\n"))[0]["id"]
            held = submit(runtime, spec("held"))[0]["id"]
            requests.post(f"{runtime.address}/v1/jobs/{held}/hold", headers={"X-Nomad-Gpu-Client": "test"},
                          timeout=10).raise_for_status()
            wait_for(lambda: any(e["id"] == blocker and e["state"] == "running" for e in entries(runtime)),
                     what="the blocker running")

            def explained() -> bool:
                queued = [e for e in entries(runtime) if e["state"] == "queued"]
                return len(queued) == 202 and all(e["reason"] and not e["reason"].startswith("not decided")
                                                  for e in queued)

            wait_for(explained, what="every waiting entry's reason")
            queued = {e["id"]: e for e in entries(runtime) if e["state"] == "queued"}
            sweep = trials[0]["sweep"]
            throttled = [e for e in queued.values() if e["reason"].startswith(f"sweep {sweep} at max_parallel 16")]
            assert len(throttled) == 184 and all(e["position"] is None for e in throttled)
            assert queued[after]["reason"].startswith(f"after: waiting for {blocker}")
            assert queued[held]["reason"] == "held by user"
            assert queued[after]["position"] is None and queued[held]["position"] is None
            positions = sorted(e["position"] for e in queued.values() if e["position"] is not None)
            assert positions == list(range(1, 17))  # the 16 trials the cycle considered, in its order
        finally:
            runtime.stop()
