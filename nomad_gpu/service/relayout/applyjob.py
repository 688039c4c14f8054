"""The short Nomad batch job that re-lays one GPU on its node: `nomad-gpu node mig apply`, pinned there.

Nomad stays the one engine that runs things on nodes (DESIGN decision 15): the service never reaches a
node itself. The job is internal: its ID carries a prefix no user job can take (users' jobs are named
after their queue entries), it runs in the namespace the operator chose for it, with the driver the
operator allows there (`raw_exec` by default, as the command needs the host's NVML and the
`mig/config` capability: docs/mig-relayout.md), and it never restarts or reschedules: a failed apply
is rolled back by the service, not retried blindly by Nomad.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from nomad_gpu.domain.errors import InvalidRequest

JOB_PREFIX = "nomad-gpu-mig-relayout-"
_SAFE = re.compile(r"^[A-Za-z0-9@.,:/_+-]*$")


@dataclass(frozen=True)
class ApplyJobSettings:
    namespace: str = "default"
    driver: str = "raw_exec"
    command: str = "nomad-gpu"
    """The path of the `nomad-gpu` executable on the nodes."""
    datacenters: tuple[str, ...] = ("*",)
    cpu_mhz: int = 100
    memory_mb: int = 128


def apply_job_id(node_id: str, gpu: str, serial: int) -> str:
    return f"{JOB_PREFIX}{node_id[:8]}-{gpu.removeprefix('GPU-')[:8]}-{serial}"


def apply_job_hcl(job_id: str, node_id: str, gpu: str, layout: str, expect_idle: tuple[str, ...],
                  settings: ApplyJobSettings = ApplyJobSettings(), *, epoch: int | None = None) -> str:
    """The jobspec; every value is checked against a strict pattern before it reaches HCL (no `${`).
    ``epoch``: the registering leader's (service/life/fencing.py), written into the job's meta."""
    for what, value in (("job", job_id), ("node", node_id), ("gpu", gpu), ("layout", layout),
                        ("instance", ",".join(expect_idle)), ("driver", settings.driver),
                        ("command", settings.command), ("namespace", settings.namespace)):
        if not _SAFE.match(value):
            raise InvalidRequest(f"MIG re-layout job: {what} {value!r} has characters a jobspec value may not")
    args = ["node", "mig", "apply", "--gpu", gpu, "--layout", layout, "--expect-idle", ",".join(expect_idle)]
    q = json.dumps  # a JSON string is a valid HCL string for these characters
    return "\n".join([
        f"job {q(job_id)} {{",
        '  type = "batch"',
        f"  namespace = {q(settings.namespace)}",
        f"  datacenters = [{', '.join(q(d) for d in settings.datacenters)}]",
        "  meta {",
        '    nomad_gpu_internal = "mig-relayout"',
        *([f"    nomad_gpu_epoch = {q(str(int(epoch)))}"] if epoch is not None else []),
        "  }",
        "  constraint {",
        '    attribute = "${node.unique.id}"',
        f"    value = {q(node_id)}",
        "  }",
        '  group "apply" {',
        "    count = 1",
        '    restart {\n      attempts = 0\n      mode = "fail"\n    }',
        "    reschedule {\n      attempts = 0\n      unlimited = false\n    }",
        '    task "apply" {',
        f"      driver = {q(settings.driver)}",
        "      config {",
        f"        command = {q(settings.command)}",
        f"        args = [{', '.join(q(a) for a in args)}]",
        "      }",
        f"      resources {{\n        cpu = {settings.cpu_mhz}\n        memory = {settings.memory_mb}\n      }}",
        "    }",
        "  }",
        "}",
        "",
    ])
