"""`POST /v1/jobs/parse`: the HCL subset maps to Nomad's Job JSON; everything else is refused."""

from __future__ import annotations

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.hcl import HclError, parse_job_hcl

from .helpers import jobspec

FULL = r'''
job "train-42" {
  type        = "batch"
  priority    = 70
  datacenters = ["dc1", "dc2"]
  namespace   = "default"
  node_pool   = "gpu"
  region      = "global"
  meta {
    team                     = "vision"
    nomad_gpu_dev_duration_s = "2.5"
  }
  constraint {
    attribute = "${node.unique.id}"
    value     = "node-1"
  }
  group "trainer" {
    count = 2
    meta = { "queue.entry" = "q-17" }
    constraint {
      attribute = "${node.datacenter}"
      operator  = "="
      value     = "dc1"
    }
    restart {
      attempts = 0
      mode     = "fail"
      delay    = "15s"
      interval = "1h30m"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "train" {
      driver = "docker"
      config {
        image = "pytorch/pytorch:2.4"
        args  = ["--devices", "${device.ids}", "--lr=3e-4"]
        mount {
          type   = "bind"
          source = "/data"
        }
      }
      env {
        NVIDIA_VISIBLE_DEVICES = "${NVIDIA_VISIBLE_DEVICES}"
        QUOTE                  = "a \"quoted\" \\ value\n"
      }
      meta {
        step = 3
      }
      kill_timeout = "45s"
      resources {
        cpu        = 4000
        memory     = 16384
        memory_max = 32768
        device "nvidia/gpu/NVIDIA A100-SXM4-80GB" {
          count = 2
          constraint {
            attribute = "${device.ids}"
            operator  = "set_contains_any"
            value     = "GPU-a,GPU-b"
          }
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "40 GiB"
          }
          affinity {
            attribute = "${device.model}"
            operator  = "="
            value     = "NVIDIA A100-SXM4-80GB"
            weight    = 75
          }
        }
      }
    }
  }
}
'''


def test_full_mapping() -> None:
    job = parse_job_hcl(FULL)
    assert (job["ID"], job["Name"], job["Type"], job["Priority"]) == ("train-42", "train-42", "batch", 70)
    assert (job["Datacenters"], job["Namespace"], job["NodePool"], job["Region"]) == (
        ["dc1", "dc2"], "default", "gpu", "global")
    assert job["Meta"] == {"team": "vision", "nomad_gpu_dev_duration_s": "2.5"}
    assert job["Constraints"] == [{"LTarget": "${node.unique.id}", "RTarget": "node-1", "Operand": "="}]
    (group,) = job["TaskGroups"]
    assert (group["Name"], group["Count"], group["Meta"]) == ("trainer", 2, {"queue.entry": "q-17"})
    assert group["Constraints"] == [{"LTarget": "${node.datacenter}", "RTarget": "dc1", "Operand": "="}]
    assert group["RestartPolicy"] == {"Interval": 5400 * 10**9, "Attempts": 0, "Delay": 15 * 10**9, "Mode": "fail",
                                      "RenderTemplates": None}
    assert group["ReschedulePolicy"]["Attempts"] == 0 and group["ReschedulePolicy"]["Unlimited"] is False
    (task,) = group["Tasks"]
    assert (task["Name"], task["Driver"], task["KillTimeout"]) == ("train", "docker", 45 * 10**9)
    assert task["Config"] == {"image": "pytorch/pytorch:2.4", "args": ["--devices", "${device.ids}", "--lr=3e-4"],
                              "mount": [{"type": "bind", "source": "/data"}]}
    assert task["Env"] == {"NVIDIA_VISIBLE_DEVICES": "${NVIDIA_VISIBLE_DEVICES}", "QUOTE": 'a "quoted" \\ value\n'}
    assert task["Meta"] == {"step": "3"}
    resources = task["Resources"]
    assert (resources["CPU"], resources["MemoryMB"], resources["MemoryMaxMB"]) == (4000, 16384, 32768)
    assert resources["Devices"] == [{
        "Name": "nvidia/gpu/NVIDIA A100-SXM4-80GB",
        "Count": 2,
        "Constraints": [
            {"LTarget": "${device.ids}", "RTarget": "GPU-a,GPU-b", "Operand": "set_contains_any"},
            {"LTarget": "${device.attr.memory}", "RTarget": "40 GiB", "Operand": ">="},
        ],
        "Affinities": [{"LTarget": "${device.model}", "RTarget": "NVIDIA A100-SXM4-80GB", "Operand": "=",
                        "Weight": 75}],
    }]


def test_escaped_interpolation_and_heredoc() -> None:
    job = parse_job_hcl('job "j" {\n  meta {\n    literal = "$${node.unique.id}"\n    text = <<EOT\nline one\n'
                        'line "two"\nEOT\n  }\n}\n')
    assert job["Meta"]["literal"] == "${node.unique.id}"
    assert job["Meta"]["text"].startswith('line one\nline "two"')


@pytest.mark.parametrize(("hcl", "message"), [
    pytest.param('job "a" {\n  foo = "bar"\n}\n', 'An argument named "foo" is not expected here', id="attribute"),
    pytest.param('job "a" {\n  group "g" {\n    spread {\n      attribute = "x"\n    }\n  }\n}\n',
                 'Blocks of type "spread" are not expected here', id="stanza"),
    pytest.param('job "a" {\n  group "g" {\n    task "t" {\n      artifact {\n        source = "x"\n      }\n'
                 "    }\n  }\n}\n", 'Blocks of type "artifact"', id="task-stanza"),
    pytest.param('variable "x" {\n  default = 1\n}\njob "a" {\n}\n', 'Blocks of type "variable"', id="variable"),
    pytest.param('job "a" {\n  priority = 10 * 5\n}\n', "Unsupported expression", id="expression"),
    pytest.param('job "a" {\n  priority = "high"\n}\n', "must be a whole number", id="type"),
    pytest.param('job "a" {}\njob "b" {}\n', "exactly one job block", id="two-jobs"),
    pytest.param('job "a" {\n  group "g" {\n  }\n  group "g" {\n  }\n}\n', 'Duplicate group block "g"', id="dup"),
    pytest.param('job "a" {\n  group {\n  }\n}\n', "needs 1 label", id="label"),
    pytest.param('job "a" {\n', "input.hcl:", id="syntax"),
    pytest.param('job "a" {\n  group "g" {\n    task "t" {\n      kill_timeout = "soon"\n    }\n  }\n}\n',
                 "not a duration", id="duration"),
])
def test_rejections(hcl: str, message: str) -> None:
    with pytest.raises(HclError, match=message):
        parse_job_hcl(hcl)


@pytest.mark.server
def test_parse_over_http_with_python_nomad(seed: DevCluster) -> None:
    client = nomad.Nomad(address=seed.url, timeout=5)
    raw = client.jobs.parse(jobspec("p1", gpus=1, node="n-1", pin=["GPU-x"]), canonicalize=False)
    assert raw["ID"] == "p1" and raw["Priority"] is None and raw["TaskGroups"][0]["RestartPolicy"] is None
    device = raw["TaskGroups"][0]["Tasks"][0]["Resources"]["Devices"][0]
    assert device["Constraints"] == [{"LTarget": "${device.ids}", "RTarget": "GPU-x", "Operand": "set_contains_any"}]
    assert raw["TaskGroups"][0]["Tasks"][0]["Config"]["args"] == ["sleep", "${NOMAD_META_x}"]

    canonical = client.jobs.parse(jobspec("p1"), canonicalize=True)
    assert (canonical["Priority"], canonical["Namespace"], canonical["Region"]) == (50, "default", "global")
    group = canonical["TaskGroups"][0]
    assert group["RestartPolicy"]["Mode"] == "fail" and group["EphemeralDisk"]["SizeMB"] == 300


@pytest.mark.parametrize(("body", "status", "text"), [
    pytest.param({"JobHCL": "", "Canonicalize": False}, 400, "Job spec is empty", id="empty"),
    pytest.param({}, 400, "Job spec is empty", id="missing"),
    pytest.param({"JobHCL": 'job "a" {\n  bogus = 1\n}\n'}, 400, "Failed to parse job: ", id="unknown"),
])
@pytest.mark.server
def test_parse_errors_are_plain_text(seed: DevCluster, body: dict[str, object], status: int, text: str) -> None:
    reply = requests.post(f"{seed.url}/v1/jobs/parse", json=body)
    assert reply.status_code == status
    assert reply.text.startswith(text)
    assert reply.headers["content-type"].startswith("text/plain")
