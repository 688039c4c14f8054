"""`nomad-gpu`: submit, sweep, queue, status, cancel, hold, release, requeue, update, logs, inventory, render, example,
report, serve, deploy, dev, demo, bench, simulate, backup.

Every command turns bad input into one line on stderr and exit code 2 (an unreachable service or
Nomad: exit code 1), never a traceback. Settings come from flags and the environment here, once.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from nomad_gpu import __version__
from nomad_gpu.api.payloads import Allocations
from nomad_gpu.cli import connect
from nomad_gpu.cli.connect import with_scheme as with_scheme  # where `serve --listen` gets its scheme
from nomad_gpu.cli.errors import friendly
from nomad_gpu.cli.output import emit_json, table
from nomad_gpu.defaults import DEFAULT_ADDR

CLUSTER_HELP = "Cluster file (YAML), or a bundled cluster by name: seed-a800, mixed-fleet, mig-h100, nvlink-fleet."
TEMPLATES_HELP = "Directory of job templates (<name>.hcl.j2) to use instead of the bundled ones."




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


# ---- running it ----------------------------------------------------------------------------------
@main.command()
@click.option("--db", "db_path", default="nomad-gpu.db", show_default=True, envvar="NOMAD_GPU_DB", show_envvar=True,
              help="The queue database: a SQLite file (WAL), a path or sqlite:///path; or postgresql://user@host:5432/"
                   "dbname (the password from PGPASSWORD or ~/.pgpass, never on the command line).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML: teams, quotas, sharing, policy.")
@click.option("--listen", default=None, help=f"API address (default NOMAD_GPU_ADDR or {DEFAULT_ADDR}).")
@click.option("--tls-cert", type=click.Path(dir_okay=False), help="PEM certificate, for an https:// address.")
@click.option("--tls-key", type=click.Path(dir_okay=False), help="PEM private key, for an https:// address.")
@click.option("--templates", "templates_dir", type=click.Path(file_okay=False, exists=True, path_type=Path),
              default=None, help=TEMPLATES_HELP)
@click.option("--ignore-existing-jobs", is_flag=True,
              help="Start on a new database even though Nomad runs jobs of this service (left to Nomad).")
@click.option("--adopt-existing-jobs", is_flag=True,
              help="Start on a new database and book each live job of this service until it ends (none stopped).")
@friendly
def serve(db_path: str, config_path: str | None, listen: str | None, tls_cert: str | None,
          tls_key: str | None, templates_dir: Path | None, ignore_existing_jobs: bool,
          adopt_existing_jobs: bool) -> None:
    """Run the service against NOMAD_ADDR (a non-loopback address needs a token; https needs --tls-*)."""
    from dataclasses import replace

    from nomad_gpu.domain.errors import InvalidRequest
    from nomad_gpu.service.app import ServiceRuntime
    from nomad_gpu.service.loops.existingjobs import BOTH_FLAGS

    if ignore_existing_jobs and adopt_existing_jobs:  # before the database file is made
        raise InvalidRequest(BOTH_FLAGS)
    settings = replace(_service_settings(db_path, config_path, listen, templates_dir=templates_dir),
                       tls_cert=tls_cert, tls_key=tls_key, ignore_existing_jobs=ignore_existing_jobs,
                       adopt_existing_jobs=adopt_existing_jobs)
    runtime = ServiceRuntime(settings)
    addr = runtime.start()
    click.echo(f"nomad-gpu {__version__} serving on {addr}, Nomad at {runtime.settings.nomad.address}")
    # SIGHUP: teams and tokens read again from --config; a replica another one deposed exits 1 (restarted, it stands by)
    sys.exit(runtime.serve_until_signalled())


def _service_settings(db_path: str, config_path: str | None, listen: str | None,
                      nomad_addr: str | None = None, templates_dir: Path | None = None) -> Any:
    from nomad_gpu.nomad.client import NomadSettings
    from nomad_gpu.service.config.settings import ServiceSettings, load_config

    env = dict(os.environ)
    if nomad_addr:
        env["NOMAD_ADDR"] = nomad_addr
    scheduling, access = load_config(config_path)
    return ServiceSettings(nomad=NomadSettings.from_env(env), scheduling=scheduling, access=access,
                           db_path=db_path, listen=with_scheme(listen or env.get("NOMAD_GPU_ADDR") or DEFAULT_ADDR),
                           token=env.get("NOMAD_GPU_TOKEN") or None, templates_dir=templates_dir,
                           config_path=config_path)


NOMAD_VERSION_HELP = ("Nomad release the dev cluster plays (default: the newest it models, 2.0.x): 1.11.2 and later "
                      "write the event stream on a hijacked, close-delimited connection, 1.11.1 and earlier chunk it.")


@main.command("dev-cluster")
@click.option("--cluster", "cluster_path", required=True, help=CLUSTER_HELP)
@click.option("--port", default=4646, show_default=True, type=click.IntRange(0, 65535))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--speed", default=1.0, show_default=True, type=click.FloatRange(min=0.001),
              help="Time compression: a 150 s task runs 150/speed s.")
@click.option("--nomad-version", default=None, help=NOMAD_VERSION_HELP)
@click.option("--acl-file", type=click.Path(dir_okay=False), default=None,
              help="YAML: ACL policies (Nomad's HCL) and tokens, as a cluster file's acl: section; turns ACLs on.")
@friendly
def dev_cluster(cluster_path: str, port: int, host: str, speed: float, nomad_version: str | None,
                acl_file: str | None) -> None:
    """Serve the embedded, Nomad-API-compatible dev cluster (a stand-in for a real Nomad)."""
    import gc

    from nomad_gpu.bundled import resolve_cluster
    from nomad_gpu.devcluster import ClusterFileError, serve_forever
    from nomad_gpu.devcluster.version import DEFAULT_NOMAD_VERSION, NomadVersion

    version = NomadVersion.parse(nomad_version or DEFAULT_NOMAD_VERSION)  # a bad one fails before anything starts
    cluster_file = resolve_cluster(cluster_path)

    # a server process with a large, long-lived heap: collect young objects less often, and never
    # re-scan what start-up built (the HCL grammar, the cluster), so requests do not stall on GC
    gc.set_threshold(50_000, 50, 100)
    gc.freeze()
    try:
        serve_forever(cluster_file, host=host, port=port, speed=speed, nomad_version=version, acl_file=acl_file,
                      on_ready=lambda url: click.echo(f"dev cluster (Nomad {version}) on {url}  "
                                                      f"(export NOMAD_ADDR={url})"))
    except ClusterFileError as exc:
        raise ValueError(str(exc)) from exc


@main.command()
@click.option("--cluster", "cluster_path", default="mixed-fleet", show_default=True, help=CLUSTER_HELP)
@click.option("--speed", default=10.0, show_default=True, type=click.FloatRange(min=0.001))
@click.option("--db", "db_path", default=None,
              help="The queue database, a path or sqlite:///path (default: a temporary SQLite file).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML: teams, quotas, sharing.")
@click.option("--nomad-version", default=None, help=NOMAD_VERSION_HELP)
@click.option("--templates", "templates_dir", type=click.Path(file_okay=False, exists=True, path_type=Path),
              default=None, help=TEMPLATES_HELP)
@friendly
def dev(cluster_path: str, speed: float, db_path: str | None, config_path: str | None,
        nomad_version: str | None, templates_dir: Path | None) -> None:
    """Dev cluster and service together in the foreground, like `nomad agent -dev`."""
    import tempfile

    from nomad_gpu.bundled import resolve_cluster
    from nomad_gpu.devcluster import DevCluster
    from nomad_gpu.devcluster.version import DEFAULT_NOMAD_VERSION
    from nomad_gpu.service.app import ServiceRuntime
    from nomad_gpu.service.loops.reload import wait_for_signals

    cluster = DevCluster(resolve_cluster(cluster_path), speed=speed,
                         nomad_version=nomad_version or DEFAULT_NOMAD_VERSION)
    nomad_url = cluster.start()
    db = db_path or str(Path(tempfile.mkdtemp(prefix="nomad-gpu-dev-")) / "queue.db")
    runtime = ServiceRuntime(_service_settings(db, config_path, None, nomad_addr=nomad_url,
                                               templates_dir=templates_dir))
    addr = runtime.start(wait_ready_s=10)
    click.echo(f"dev cluster (Nomad API): {nomad_url}\nnomad-gpu:               {addr}\ndashboard:               "
               f"{addr}/ui\nqueue:                   {db}\n\nexport NOMAD_GPU_ADDR={addr}\n"
               "nomad-gpu example train > train.yaml   # nomad-gpu example: all the examples\n"
               "nomad-gpu submit train.yaml\nnomad-gpu queue\n\nCtrl-C stops both.")
    try:
        wait_for_signals(runtime.reload)
    finally:
        runtime.stop()
        cluster.stop()


@main.command()
@click.option("--jobs", default=66, show_default=True, type=click.IntRange(1, 10000))
@click.option("--duration", "duration_s", default=150.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds each training job runs (before compression).")
@click.option("--speed", default=30.0, show_default=True, type=click.FloatRange(min=0.1))
@click.option("--nomad-version", default=None, help=NOMAD_VERSION_HELP)
@click.option("--json", "as_json", is_flag=True)
@friendly
def demo(jobs: int, duration_s: float, speed: float, nomad_version: str | None, as_json: bool) -> None:
    """66 one-GPU jobs on 8 x A800 through the real service and a dev cluster; facts from its audit."""
    from nomad_gpu.devcluster.version import DEFAULT_NOMAD_VERSION, NomadVersion
    from nomad_gpu.service.demo import DemoConfig, run_demo

    version = str(NomadVersion.parse(nomad_version or DEFAULT_NOMAD_VERSION))

    if not as_json:
        click.echo(f"demo: {jobs} x {duration_s:g} s one-GPU jobs on 8 x A800-80GB, time x{speed:g} ...")
    report = run_demo(DemoConfig(jobs=jobs, duration_s=duration_s, speed=speed, nomad_version=version))
    if as_json:
        emit_json(report)
        return
    table("nomad-gpu demo (from the dev cluster's audit)", ["metric", "value"],
          [(k, v) for k, v in report.items()])


@main.command()
@click.option("--nodes", default=1000, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--gpus-per-node", default=8, show_default=True, type=click.IntRange(1, 64))
@click.option("--queued", default=10000, show_default=True, type=click.IntRange(1, 10_000_000))
@click.option("--policy", default="frag-aware", show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@friendly
def bench(nodes: int, gpus_per_node: int, queued: int, policy: str, seed: int, as_json: bool) -> None:
    """Scheduling-engine throughput on a synthetic cluster and queue."""
    from nomad_gpu.domain.policies import get_policy
    from nomad_gpu.sim.enginebench import BenchConfig, run

    get_policy(policy)
    report = run(BenchConfig(nodes=nodes, gpus_per_node=gpus_per_node, queued=queued, policy=policy, seed=seed))
    if as_json:
        click.echo(json.dumps(report))
        return
    table("nomad-gpu bench", ["metric", "value"], [(k, v) for k, v in report.items()])


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
from nomad_gpu.cli.storecmd import store  # noqa: E402
from nomad_gpu.cli.sweeps import sweep  # noqa: E402

for _command in (node, backup, deploy, store, queue, cancel, sweep, hold, release, requeue, update, logs, example,
                 report, keep):
    main.add_command(_command)


_register_optional_groups()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
