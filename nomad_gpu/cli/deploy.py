"""`nomad-gpu deploy render`: write the Nomad job that runs the service itself (docs/deploy.md).

The operator's choices (driver and image or command, port, datacenters, node pool, namespace, the
Nomad Variable's path, TLS) become a :class:`ServiceJobSettings`; the job file carries no secret:
every token and key is read by Nomad's client from the Variable when the task starts.
"""

from __future__ import annotations

from pathlib import Path

import click

from nomad_gpu.cli.errors import friendly
from nomad_gpu.defaults import DEFAULT_PORT
from nomad_gpu.domain.errors import InvalidRequest

DEFAULT_NOMAD_ADDR = "https://127.0.0.1:4646"
"""The Nomad agent on the service's own node; Nomad's generated certificates name 127.0.0.1."""
RENDER_EPILOG = """\b
The Nomad Variable (default nomad/jobs/JOB_ID, in the job's namespace) holds:
  config             the service's YAML config (teams, quotas, api.tokens)
  nomad_token        the Nomad ACL token of the service (docs/nomad-acl.md)
  check_token        a token from api.tokens the health check sends
  tls_cert, tls_key  the service's own certificate and key (with --tls)
  nomad_ca_cert      the CA that signed Nomad's certificate (with --nomad-ca)
  nomad_client_cert, nomad_client_key   (with --nomad-client-cert)
e.g. nomad var put -namespace NS nomad/jobs/nomad-gpu config=@config.yaml nomad_token=... \\
  check_token=... tls_cert=@cert.pem tls_key=@key.pem nomad_ca_cert=@nomad-ca.pem
Then: nomad-gpu deploy render ... -o nomad-gpu.hcl && nomad job run nomad-gpu.hcl (docs/deploy.md)."""


@click.group()
def deploy() -> None:
    """Deploy the service itself on Nomad."""


@deploy.command(epilog=RENDER_EPILOG)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the job to FILE instead of standard output.")
@click.option("--driver", type=click.Choice(["docker", "exec", "raw_exec"]), default="docker", show_default=True,
              help="Nomad task driver: docker runs --image; exec and raw_exec run --command on the node "
                   "(raw_exec must be enabled on the client and runs unisolated).")
@click.option("--image", help="Container image with nomad-gpu installed (required with --driver docker).")
@click.option("--command", "command", default="nomad-gpu", show_default=True,
              help="The nomad-gpu executable: in the image (docker), or its path on the node (exec: inside "
                   "the task's chroot, e.g. under /usr; raw_exec: any path).")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port of the group network the service listens on, at the allocation's address "
                   "(${NOMAD_ADDR_api}); 0 lets Nomad pick one (find it with `nomad service info`).")
@click.option("--job-id", default="nomad-gpu", show_default=True, help="The Nomad job's ID.")
@click.option("--namespace", default="default", show_default=True,
              help="Nomad namespace of the service's job (and of its Variable).")
@click.option("--datacenter", "datacenters", multiple=True,
              help="A datacenter the job may run in (repeat for several; default any: *).")
@click.option("--node-pool", help="Node pool the service's own job runs in (e.g. a small control pool, "
                                  "not the GPU pool). Default: Nomad's default pool.")
@click.option("--variable", help="Path of the Nomad Variable with the config, tokens and TLS files "
                                 "(default nomad/jobs/JOB_ID, which the task may read without any ACL policy).")
@click.option("--tls/--no-tls", default=True, show_default=True,
              help="Serve https with the Variable's tls_cert and tls_key (--no-tls: plain http, e.g. behind "
                   "a proxy that terminates TLS on the same node).")
@click.option("--nomad-addr", default=DEFAULT_NOMAD_ADDR, show_default=True,
              help="Nomad's HTTP API as the service reaches it (NOMAD_ADDR); http://127.0.0.1:4646 on a "
                   "cluster without TLS.")
@click.option("--nomad-ca/--no-nomad-ca", default=None,
              help="Verify Nomad with the Variable's nomad_ca_cert (NOMAD_CACERT). Default: on for an "
                   "https --nomad-addr.")
@click.option("--nomad-client-cert", is_flag=True,
              help="Present the Variable's nomad_client_cert/nomad_client_key to Nomad (verify_https_client).")
@click.option("--service-name", default="nomad-gpu", show_default=True,
              help="Name of the service registration, with an HTTP check on /v1/status.")
@click.option("--service-provider", type=click.Choice(["nomad", "consul"]), default="nomad", show_default=True,
              help="Nomad's own service catalogue, or Consul.")
@click.option("--check-verify-tls", is_flag=True,
              help="With --service-provider consul: have Consul's check verify the service's certificate (the "
                   "default skips it; the check runs from the service's own node). Nomad's own checks always "
                   "verify it against the node's system CAs (Nomad refuses tls_skip_verify for them): put a "
                   "private CA in the node's trust store.")
@click.option("--host-volume", default="nomad-gpu", show_default=True,
              help="The client's host volume that keeps the queue database (client { host_volume ... }).")
@click.option("--data-dir", default="/var/lib/nomad-gpu", show_default=True,
              help="Where the host volume is mounted in the task; the database is DATA_DIR/queue.db. With "
                   "raw_exec, which mounts nothing, give the volume's path on the node (its client config's path).")
@click.option("--env", "env_pairs", multiple=True, metavar="KEY=VALUE",
              help="A plain environment variable for the service (repeatable), e.g. "
                   "NOMAD_GPU_WATCH_NAMESPACES=ml,research or NOMAD_TLS_SERVER_NAME=client.global.nomad; "
                   "secrets are refused: they go in the Variable.")
@click.option("--cpu", type=click.IntRange(min=1), default=500, show_default=True, help="CPU (MHz) for the task.")
@click.option("--memory", type=click.IntRange(min=10), default=512, show_default=True,
              help="Memory (MiB) for the task.")
@click.option("--priority", type=click.IntRange(1, 100), default=80, show_default=True, help="The job's priority.")
@click.option("--replicas", type=click.IntRange(1, 7), default=1, show_default=True,
              help="Above 1: that many replicas on distinct nodes sharing a PostgreSQL queue, its URL the Variable's "
                   "db_url item (no host volume; docs/deploy.md, high availability).")
@friendly
def render(output: Path | None, driver: str, image: str | None, command: str, port: int, job_id: str,
           namespace: str, datacenters: tuple[str, ...], node_pool: str | None, variable: str | None, tls: bool,
           nomad_addr: str, nomad_ca: bool | None, nomad_client_cert: bool, service_name: str,
           service_provider: str, check_verify_tls: bool, host_volume: str, data_dir: str,
           env_pairs: tuple[str, ...], cpu: int, memory: int, priority: int, replicas: int = 1) -> None:
    """Write the service's Nomad job (HCL2) for `nomad job run`: a port on the allocation's address, the
    config, tokens and TLS files from a Nomad Variable (never in the job), a health check on /v1/status, the
    queue on a host volume."""
    from nomad_gpu.render import ServiceJobSettings, render_service_job

    if driver == "docker" and not image:
        raise InvalidRequest("--driver docker needs --image (or choose --driver exec/raw_exec with --command)")
    if driver != "docker" and image:
        raise InvalidRequest(f"--image is for --driver docker; --driver {driver} runs --command on the node")
    env = {"NOMAD_ADDR": nomad_addr}
    for pair in env_pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidRequest(f"--env {pair!r}: must be KEY=VALUE")
        env[key] = value
    settings = ServiceJobSettings(
        image=image or "", env=env, job_id=job_id, priority=priority, datacenters=datacenters or ("*",),
        namespace=namespace, node_pool=node_pool, driver=driver, command=command, cpu=cpu, memory=memory,
        host_volume=host_volume, data_dir=data_dir, port=port, variable=variable or f"nomad/jobs/{job_id}",
        tls=tls, nomad_ca=nomad_addr.startswith("https://") if nomad_ca is None else nomad_ca,
        nomad_client_cert=nomad_client_cert, service_name=service_name, service_provider=service_provider,
        check_tls_skip_verify=not check_verify_tls, replicas=replicas)
    hcl = render_service_job(settings)
    if output is None:
        click.echo(hcl, nl=False)
        return
    output.write_text(hcl, encoding="utf-8")
    click.echo(f"wrote {output}: `nomad job run {output}` (the Variable {settings.variable} must exist first)",
               err=True)
