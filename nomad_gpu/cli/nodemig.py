"""`nomad-gpu node mig apply`: re-lay one MIG-mode GPU of this node to a target layout.

The service runs it on a node through a short Nomad batch job when a waiting MIG ask needs instances
that only a re-layout of idle ones can make (DESIGN decision 15); an operator may run it by hand too.
It prints `{"gpu", "before", "after", "created", "destroyed"}` as JSON on stdout, whatever the outcome.
Exit codes: 0 done (or nothing to do), 2 bad input (layout, GPU), 3 refused (an instance it would
destroy is not listed as idle, or has processes), 1 NVML missing or failing part-way.
"""

from __future__ import annotations

import click

from nomad_gpu.cli.errors import BAD_INPUT, FAILED
from nomad_gpu.cli.output import emit_json, fail
from nomad_gpu.domain.errors import InvalidRequest, Unavailable
from nomad_gpu.nvml import FakeNvml, NvmlReader, load_layout
from nomad_gpu.nvml.migapply import ApplyError, Refused, apply_layout

REFUSED = 3
"""An instance it would destroy is not known idle or is in use: nothing running was touched."""


@click.group("mig")
def mig() -> None:
    """MIG layouts of this node's GPUs (NVML; needs root, or the mig/config capability)."""


@mig.command("apply")
@click.option("--gpu", "gpu", required=True, metavar="GPU-UUID", help="The MIG-mode GPU to re-lay.")
@click.option("--layout", required=True, metavar="PROFILE@START,...",
              help="The whole target layout, e.g. 3g.40gb@0,3g.40gb@4 (an empty string: no instances).")
@click.option("--expect-idle", default="", metavar="MIG-UUID,...",
              help="Instances that may be destroyed; any other the layout would remove makes it refuse.")
@click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")
@click.option("--fake-nvml", "fake", metavar="LAYOUT", hidden=True,
              help="Act on a fake node (a named layout or a JSON file): demos and tests only.")
def apply(gpu: str, layout: str, expect_idle: str, dry_run: bool, fake: str | None) -> None:
    """Destroy idle instances and create the missing ones so that GPU has exactly LAYOUT."""
    try:
        nvml = FakeNvml(load_layout(fake)) if fake else None
    except ValueError as exc:
        fail(str(exc))
        return
    idle = frozenset(filter(None, (i.strip() for i in expect_idle.split(","))))
    with NvmlReader(nvml) as reader:
        try:
            report = apply_layout(reader, gpu, layout, idle, dry_run=dry_run)
        except InvalidRequest as exc:
            fail(str(exc), code=BAD_INPUT)
            return
        except ApplyError as exc:
            if exc.report is not None:
                emit_json(exc.report.to_json())
            fail(str(exc), code=REFUSED if isinstance(exc, Refused) else FAILED)
            return
        except Unavailable as exc:
            fail(str(exc), code=FAILED)
            return
    emit_json(report.to_json())
