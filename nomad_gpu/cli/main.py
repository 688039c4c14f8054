"""`nomad-gpu`: submit, sweep, queue, status, cancel, hold, release, requeue, update, logs, inventory, render, example,
report, serve, deploy, dev, demo, bench, simulate, backup.

Every command turns bad input into one line on stderr and exit code 2 (an unreachable service or
Nomad: exit code 1), never a traceback. Settings come from flags and the environment here, once.
This module is the group and the user's own commands (submit, status, inventory, render); the
commands that run something (serve, dev-cluster, dev, demo, bench) are :mod:`nomad_gpu.cli.runcmds`,
the rest live in the modules registered at the bottom.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import click

from nomad_gpu import __version__
from nomad_gpu.api.payloads import Allocations
from nomad_gpu.cli import connect
from nomad_gpu.cli.errors import friendly
from nomad_gpu.cli.output import emit_json, table
from nomad_gpu.cli.runcmds import TEMPLATES_HELP


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING - 10 * min(verbose, 2)
    from nomad_gpu.service.loglimit import configure_logging  # the CLI's other commands never load the service

    configure_logging(level)  # repeated lines rate-limited


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nomad-gpu")
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
def main(verbose: int) -> None:
    """An ordered, fair, fragmentation-aware GPU queue for HashiCorp Nomad."""
    _setup_logging(verbose)


# ---- the user's surface ------------------------------------------------------------------------
@main.command()
@click.argument("spec_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--idempotency-key", help="Submitting again with the same key returns the first submission.")
@click.option("--allow-unschedulable", is_flag=True,
              help="Queue it even if no node of the fleet could run it now (a fleet about to grow); "
                   "the spec field allow_unschedulable: true does the same.")
@click.option("--json", "as_json", is_flag=True, help="Print the stored entries as JSON.")
@friendly
def submit(spec_file: Path, idempotency_key: str | None, allow_unschedulable: bool, as_json: bool) -> None:
    """Queue a job (or a sweep) from a YAML spec. A spec no node of the fleet could ever run is refused
    (exit 2) with the nearest the fleet offers; model names may be written as `queue` and `inventory` show them."""
    from nomad_gpu.render import load_spec

    load_spec(spec_file)  # validate locally first: the same clear, located error without a round trip
    text = spec_file.read_text(encoding="utf-8")
    if allow_unschedulable:  # sent as JSON with the field set: the one switch the service reads
        from nomad_gpu.render.loading import decode_spec

        text = json.dumps({**decode_spec(text).data, "allow_unschedulable": True})
    entries = connect.client().submit(text, idempotency_key)
    if as_json:
        emit_json([e.to_json() for e in entries])
        return
    if entries and entries[0].sweep:
        click.echo(f"sweep {entries[0].sweep}: {len(entries)} trials queued "
                   f"(nomad-gpu sweep status {entries[0].sweep})")
    for e in entries:
        click.echo(f"{e.id}  {e.name}  {e.state}  (nomad job {e.nomad_job_id})")


@main.command()
@click.argument("entry_id", required=False)
@click.option("--hcl", is_flag=True, help="Print the exact HCL the entry's job was registered with (read from Nomad).")
@click.option("--json", "as_json", is_flag=True)
@click.option("--service", "service_only", is_flag=True, help="The service's own status (what no ID shows): its role.")
@friendly
def status(entry_id: str | None, hcl: bool, as_json: bool, service_only: bool = False) -> None:
    """The service's status (a table on a terminal, JSON with --json or when piped), or one entry's: its
    times, its Nomad job and allocations, where to see it."""
    from nomad_gpu.cli.api_client import ServiceError

    client = connect.client()
    if not entry_id or service_only:
        if hcl:
            raise ValueError("--hcl needs an entry ID: nomad-gpu status ID --hcl")
        health = client.status()
        if as_json or not sys.stdout.isatty():  # a script reads JSON; a person reads the table
            emit_json(health.to_json())
            return
        from nomad_gpu.cli.serviceview import service_rows

        for label, value in service_rows(health):  # aligned like `status ID`
            click.echo(f"{label:20} {value}")
        return
    if hcl:
        click.echo(client.hcl(entry_id).hcl, nl=False)
        return
    info = client.job(entry_id)
    nomad: Allocations | None = None
    nomad_error = None
    try:
        nomad = client.allocations(entry_id)
    except ServiceError as exc:  # Nomad unreachable: the service's own record still answers
        nomad_error = str(exc)
    if as_json:
        times = nomad.to_json() if nomad is not None else {}
        extra = {k: times[k] for k in ("started_at", "waited_s", "ran_s", "allocations", "nomad_ui") if k in times}
        emit_json({**info.to_json(), **extra})
        return
    from nomad_gpu.cli.entryview import status_lines
    from nomad_gpu.cli.queueview import usage_note

    names = connect.node_names(client) if info.placements else {}
    for label, value in status_lines(info, nomad, nomad_error, names):
        click.echo(f"{label:13} {value}")
    if after := info.spec.get("after"):
        click.echo(f"{'after':13} {', '.join(map(str, after))} (starts once each completed successfully)")
    if note := usage_note(info, time.time()):
        click.echo(f"{'gpu usage':13} {note}")


@main.command()
@click.option("--json", "as_json", is_flag=True)
@click.option("--devices", is_flag=True, help="One row per GPU and MIG instance: its use and who holds it; each MIG "
              "GPU drawn by placement, with a re-layout in progress.")
@friendly
def inventory(as_json: bool, devices: bool) -> None:
    """GPU, MIG and time-slice capacity per node, free and total (in GPU-equivalents too), each
    MIG-partitioned GPU drawn as its slices (which are used, and by which entry), and each model's short
    name beside its full one."""
    from nomad_gpu.cli.inventoryview import (
        DEVICE_COLUMNS,
        MIG_COLUMNS,
        NODE_COLUMNS,
        TOPOLOGY_COLUMNS,
        device_rows,
        mig_rows,
        node_row,
        topology_rows,
    )
    from nomad_gpu.cli.miglayoutview import LAYOUT_COLUMNS, layout_rows
    from nomad_gpu.cli.modelsview import MODEL_COLUMNS, model_rows

    nodes = sorted(connect.client().inventory(), key=lambda n: (n.name, n.id))
    if as_json:
        emit_json([n.to_json() for n in nodes])
        return
    if devices:
        table(None, DEVICE_COLUMNS, [row for n in nodes for row in device_rows(n)])
        if layouts := [row for n in nodes for row in layout_rows(n)]:  # each MIG GPU by placement
            click.echo("")
            table(None, LAYOUT_COLUMNS, layouts)
        if any(n.topology for n in nodes):  # each node's NVLink groups and NUMA nodes, where published
            click.echo("")
            table(None, TOPOLOGY_COLUMNS, [row for n in nodes for row in topology_rows(n)])
        return
    table(None, NODE_COLUMNS, [node_row(n) for n in nodes])
    if migs := [row for n in nodes for row in mig_rows(n)]:
        click.echo("")
        table(None, MIG_COLUMNS, migs)
    if models := model_rows(nodes):
        click.echo("")
        table(None, MODEL_COLUMNS, models)


@main.command()
@click.argument("spec_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--node", default="<node-id>", show_default=True, help="Node to pin to in the preview.")
@click.option("--job-id", default=None, help="Nomad job ID (default: ngpu-preview).")
@click.option("--templates", "templates_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help=TEMPLATES_HELP)
@click.option("--share-slots", type=click.IntRange(0, 48), default=4, show_default=True,
              help="Slots of the shared GPU a share is previewed on (its device plugin's share instances); "
                   "0 previews advisory sharing without the plugin.")
@friendly
def render(spec_file: Path, node: str, job_id: str | None, templates_dir: Path | None, share_slots: int) -> None:
    """Render a spec to HCL with a placeholder placement (every trial, for a sweep)."""
    from nomad_gpu import sharecontract
    from nomad_gpu.render import GroupPlacement, JobRenderer, RenderPlacement, SweepSpec, load_spec
    from nomad_gpu.render.sweep import expand_sweep

    spec = load_spec(spec_file)
    specs = expand_sweep(spec) if isinstance(spec, SweepSpec) else [spec]
    renderer = JobRenderer(templates_dir) if templates_dir else JobRenderer()
    for i, s in enumerate(specs):
        groups = []
        for g in s.groups:
            if g.share is not None and share_slots:
                k = sharecontract.instances_for(g.share.milli, share_slots)
                groups.append(GroupPlacement(g.name, f"{sharecontract.SHARE_DEVICE_PREFIX}<model>",
                                             tuple(sharecontract.share_id("GPU-<shared>", i) for i in range(k)),
                                             share_gpu="GPU-<shared>", share_milli=g.share.milli))
            elif g.share is not None:
                groups.append(GroupPlacement(g.name, None, (), share_gpu="GPU-<shared>", share_milli=g.share.milli))
            elif g.gpu is not None or g.mig is not None:
                n = g.device_count * g.count
                name = (f"nvidia/gpu/<model> MIG {g.mig.profile}" if g.mig is not None else "nvidia/gpu/<model>")
                groups.append(GroupPlacement(g.name, name, tuple(f"<device-{k}>" for k in range(n))))
            else:
                if i == 0 and s.chooses_kind(g):  # chosen at admission, over the fleet as it then is
                    click.echo(f"note: groups[{g.name}]: its class ({s.class_of(g)}) chooses whole GPU, MIG or share "
                               "at admission; this preview has no device block", err=True)
                groups.append(GroupPlacement(g.name, None, ()))
        placement = RenderPlacement(node, tuple(groups))
        click.echo(renderer.render_job(s, job_id=job_id or f"ngpu-preview-{i}", placement=placement))


def _register_optional_groups() -> None:
    try:
        from nomad_gpu.cli.simulate import simulate
    except ImportError:  # pragma: no cover - only while the simulator is being built
        return
    main.add_command(simulate)


from nomad_gpu.cli.backup import backup  # noqa: E402
from nomad_gpu.cli.control import hold, keep, logs, release, requeue, update  # noqa: E402
from nomad_gpu.cli.deploy import deploy  # noqa: E402
from nomad_gpu.cli.examples import example  # noqa: E402
from nomad_gpu.cli.node import node  # noqa: E402
from nomad_gpu.cli.queuecmds import cancel, queue  # noqa: E402
from nomad_gpu.cli.report import report  # noqa: E402
from nomad_gpu.cli.runcmds import bench, demo, dev, dev_cluster, serve  # noqa: E402
from nomad_gpu.cli.storecmd import store  # noqa: E402
from nomad_gpu.cli.sweeps import sweep  # noqa: E402

for _command in (node, backup, deploy, store, queue, cancel, sweep, hold, release, requeue, update, logs, example,
                 report, keep, serve, dev_cluster, dev, demo, bench):
    main.add_command(_command)


_register_optional_groups()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
