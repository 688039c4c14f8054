"""The commands that run something: `serve` (the service), `dev-cluster`, `dev` (both together), `demo`
and `bench`.

Apart from the user's commands (:mod:`nomad_gpu.cli.main`) because they build the service's settings
from flags and the environment (once, here) and start the service, the dev cluster or a whole run of
them; each loads the service or the dev cluster only when it runs, so the other commands never import them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from nomad_gpu import __version__
from nomad_gpu.cli.connect import with_scheme
from nomad_gpu.cli.errors import friendly
from nomad_gpu.cli.output import emit_json, table
from nomad_gpu.defaults import DEFAULT_ADDR

CLUSTER_HELP = "Cluster file (YAML), or a bundled cluster by name: seed-a800, mixed-fleet, mig-h100, nvlink-fleet."
TEMPLATES_HELP = "Directory of job templates (<name>.hcl.j2) to use instead of the bundled ones."


@click.command()
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
    from nomad_gpu.nomad.connection import NomadSettings
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


@click.command("dev-cluster")
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


@click.command()
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


@click.command()
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


@click.command()
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
