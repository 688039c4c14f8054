"""`nomad-gpu node ...`: commands run on a GPU node itself (they read NVML, not the service).

`node inventory` works on any machine: without a driver it says so in one line and exits 0, because "no
GPU here" is an answer, not a failure.
"""

from __future__ import annotations

import click

from nomad_gpu.cli.output import emit_json, fail, table
from nomad_gpu.nvml import FakeNvml, Inventory, NvmlReader, load_layout


@click.group()
def node() -> None:
    """Commands for the GPU node this runs on (NVML)."""


@node.command("inventory")
@click.option("--json", "as_json", is_flag=True, help="Print the inventory as JSON.")
@click.option("--fake-nvml", "fake", metavar="LAYOUT", hidden=True,
              help="Read a fake node (a800x8, h100-mig, h200, no-driver, or a JSON file): demos and tests only.")
def inventory(as_json: bool, fake: str | None) -> None:
    """GPUs, MIG devices, utilisation, processes and links, as NVML reports them (read only)."""
    try:
        nvml = FakeNvml(load_layout(fake)) if fake else None
    except ValueError as exc:
        fail(str(exc))
        return
    with NvmlReader(nvml) as reader:
        report = reader.read()
    if as_json:
        emit_json(report.to_json())
        return
    if not isinstance(report, Inventory):
        click.echo(report.message)
        return
    _print(report)


def _print(inv: Inventory) -> None:
    rows = []
    for g in inv.gpus:
        mig = "n/a" if g.mig_mode is None else ("on" if g.mig_mode.current else "off")
        if g.mig_mode is not None and g.mig_mode.changing:
            mig += " (reset pending)"
        health = "lost" if g.lost else (g.error or "ok")
        rows.append((g.index, g.uuid, g.name, _mem(g.memory_used_mib, g.memory_total_mib),
                     _pct(g.utilisation_gpu_pct), mig, len(g.processes), health))
    table(f"driver {inv.driver_version or '?'}", ["#", "uuid", "name", "memory MiB", "util", "MIG", "procs", "health"],
          rows)
    migs = [(g.index, m.uuid, m.profile, _placement(m.placement_start, m.placement_size),
             _mem(m.memory_used_mib, m.memory_total_mib)) for g in inv.gpus for m in g.migs]
    if migs:
        table("MIG devices", ["gpu", "uuid", "profile", "placement", "memory MiB"], migs)
    linked = [(link.gpu_a, link.gpu_b, link.nvlinks, link.pcie or "?") for link in inv.links if link.nvlinks]
    if linked:
        table("NVLink", ["gpu", "gpu", "links", "pcie"], linked)
    if inv.nvswitch:
        click.echo("NVSwitch fabric: GPUs with NVLinks to it reach each other all-to-all")
    for x in inv.xid_errors:
        click.echo(f"XID {x.code} on {x.gpu_uuid}")


def _mem(used: int | None, total: int | None) -> str:
    return f"{'?' if used is None else used} / {'?' if total is None else total}"


def _pct(value: int | None) -> str:
    return "-" if value is None else f"{value} %"


def _placement(start: int | None, size: int | None) -> str:
    return "?" if start is None or size is None else f"{start}:{size}"


from nomad_gpu.cli.nodemig import mig  # noqa: E402  (the group is defined above; its commands live apart)

node.add_command(mig)
