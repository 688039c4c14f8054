"""`nomad-gpu simulate`: placement experiments on real traces, through the service's own core.

- `packing`: the FGD paper's arrival-only experiment (each task placed once or failed, workload
  inflated to `--tune` x capacity, shuffled per seed), reported as the paper reports it and
  paired with its published per-seed rows when the trace is one of theirs.
- `replay`: a queueing replay of the trace (arrivals at `creation_time`, departures after the
  task's run time) through the real scheduling cycle: utilisation, queue waits, makespan.

Bad input (a missing file, a bad seed range, an unknown policy) is one line on stderr and exit
code 2, never a traceback (the CLI's one error map, `nomad_gpu.cli.errors`). Registered in
`nomad_gpu.cli.main`; runnable alone with `python -m nomad_gpu.cli.simulate`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from nomad_gpu.cli.errors import friendly
from nomad_gpu.cli.output import table

F = TypeVar("F", bound=Callable[..., Any])


def parse_seeds(text: str) -> list[int]:
    """`42-51`, `42,45,50` or `42`: ValueError (one readable line) otherwise."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part.lstrip("-"):
                lo_text, hi_text = part.split("-", 1)
                lo, hi = int(lo_text), int(hi_text)
                if hi < lo:
                    raise ValueError
                seeds.extend(range(lo, hi + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise ValueError(f"bad seed range {text!r}: use e.g. 42-51 or 42,43,44") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"bad seed range {text!r}: seeds must be given once each")
    if len(seeds) > 1000:
        raise ValueError(f"bad seed range {text!r}: at most 1000 seeds")
    return seeds


def _existing(path: Path, what: str) -> Path:
    if not path.is_file():
        raise ValueError(f"{what} file not found: {path}")
    return path


def _check_policies(names: tuple[str, ...]) -> list[str]:
    from nomad_gpu.domain.policies import get_policy

    for name in names:
        get_policy(name)  # InvalidRequest names the known ones
    return list(dict.fromkeys(names))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def simulate() -> None:
    """Placement experiments on real cluster traces (the same core the service runs)."""



def _trace_options(fn: F) -> F:
    """--nodes, --pods and --policy, shared by both experiments."""
    fn = click.option("--policy", "policies", multiple=True, default=("frag-aware",), show_default=True,
                      help="Placement policy; repeat to compare several.")(fn)
    fn = click.option("--pods", "pods_csv", type=click.Path(path_type=Path), default=None,
                      help="Task list CSV (default: the bundled openb default trace).")(fn)
    return click.option("--nodes", "nodes_csv", type=click.Path(path_type=Path), default=None,
                        help="Node list CSV (default: the bundled openb cluster).")(fn)


@simulate.command()
@_trace_options
@click.option("--tune", type=float, default=1.3, show_default=True,
              help="Inflate (or trim) the workload to this multiple of GPU capacity.")
@click.option("--seeds", "seeds_text", default="42-51", show_default=True, help="Seeds: 42-51 or 42,43.")
@click.option("--workers", type=int, default=None, help="Processes (default: one per CPU).")
@click.option("--published", "published_csv", type=click.Path(path_type=Path), default=None,
              help="The paper's per-seed results to pair with (default: the bundled file).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Draw allocation % against arrived % to this PNG file.")
@friendly
def packing(nodes_csv: Path | None, pods_csv: Path | None, policies: tuple[str, ...], tune: float,
            seeds_text: str, workers: int | None, published_csv: Path | None, as_json: bool,
            plot_path: Path | None) -> None:
    """The FGD paper's arrival-only packing experiment, seed by seed."""
    from nomad_gpu.sim import trace as tr
    from nomad_gpu.sim.packing import run_seeds
    from nomad_gpu.sim.report import paired, published_summary, summarise

    seeds = parse_seeds(seeds_text)
    names = _check_policies(policies)
    if not 0 < tune <= 10:
        raise ValueError(f"--tune must be within (0, 10], got {tune}")
    if workers is not None and workers < 1:
        raise ValueError("--workers must be >= 1")
    nodes_path = _existing(nodes_csv or tr.NODES_CSV, "node list")
    pods_path = _existing(pods_csv or tr.PODS_CSV["default"], "task list")
    trace = tr.load_trace(nodes_path, pods_path)
    published_path = published_csv or tr.PUBLISHED_CSV
    if published_csv is not None:
        _existing(published_csv, "published results")

    started = time.monotonic()
    summaries = []
    for name in names:
        runs = run_seeds(trace, name, seeds, tune=tune, workers=workers)
        summaries.append(summarise(name, runs))
    seconds = round(time.monotonic() - started, 1)

    workload = pods_path.stem
    published = {}
    for name in ("random", "best-fit", "fgd"):
        found = published_summary(published_path, workload, name) if published_path.is_file() else None
        if found is not None and found.only(seeds).by_seed:
            published[name] = found.only(seeds)  # compared over the seeds that ran
    fgd_pub = published.get("fgd")
    ours = {s.policy: s for s in summaries}

    if plot_path is not None:
        from nomad_gpu.sim.plots import plot_packing

        shown = [published[n] for n in names if n in published]
        plot_packing(plot_path, summaries, f"{workload}, tune {tune}, seeds {seeds_text}", shown)

    if as_json:
        objects = []
        for s in summaries:
            obj = s.to_json()
            obj.update({"trace": workload, "tune": tune, "seconds_all_policies": seconds,
                        "workers": workers or os.cpu_count()})
            pub = published.get(s.policy)
            if pub is not None:
                obj["published"] = {"alloc_pct_at_100": pub.at(100), "alloc_pct_at_130": pub.at(130),
                                    "exact_seeds": sum(1 for seed in s.seeds if seed in pub.by_seed and
                                                       list(pub.by_seed[seed]) == list(s.by_seed[seed]))}
            if s.policy != "fgd" and "fgd" in ours:
                obj["paired_vs_fgd"] = paired(ours["fgd"], s).to_json()
            elif s.policy != "fgd" and fgd_pub is not None:
                obj["paired_vs_published_fgd"] = paired(fgd_pub, s).to_json()
            objects.append(obj)
        click.echo(json.dumps(objects[0] if len(objects) == 1 else objects))
        return

    rows = []
    for s in summaries:
        pub = published.get(s.policy)
        vs = ours.get("fgd") if s.policy != "fgd" else None
        pair = paired(vs, s) if vs is not None else (paired(fgd_pub, s) if fgd_pub and s.policy != "fgd" else None)
        rows.append((s.policy, s.at(100), pub.at(100) if pub else "", s.at(130), pub.at(130) if pub else "",
                     s.unallocated_at(), f"{pair.mean:+.2f} ({pair.wins}/{len(pair.diffs)})" if pair else ""))
    table(f"packing: {workload}, tune {tune}, seeds {seeds_text} ({seconds} s)",
          ["policy", "alloc@100", "published", "alloc@130", "published", "unalloc@130", "vs fgd @130 (wins)"], rows)


@simulate.command()
@_trace_options
@click.option("--speedup", type=float, default=1.0, show_default=True,
              help="Divide arrival times by this (runtimes unchanged): more load on the same cluster.")
@click.option("--node-fraction", type=float, default=1.0, show_default=True,
              help="Keep this fraction of the nodes (a seeded sample): the same work on a smaller cluster.")
@click.option("--seed", type=int, default=42, show_default=True, help="Seed of the node sample.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Draw utilisation, queue length and the wait CDF to this PNG file.")
@friendly
def replay(nodes_csv: Path | None, pods_csv: Path | None, policies: tuple[str, ...], speedup: float,
           node_fraction: float, seed: int, as_json: bool, plot_path: Path | None) -> None:
    """Queueing replay: arrivals and departures through the real cycle."""
    from nomad_gpu.sim import trace as tr
    from nomad_gpu.sim.replay import ReplayConfig, run_replay

    names = _check_policies(policies)
    config = ReplayConfig(speedup=speedup, node_fraction=node_fraction, seed=seed)
    nodes_path = _existing(nodes_csv or tr.NODES_CSV, "node list")
    pods_path = _existing(pods_csv or tr.PODS_CSV["default"], "task list")
    trace = tr.load_trace(nodes_path, pods_path)
    results = [run_replay(trace, name, config) for name in names]
    if plot_path is not None:
        from nomad_gpu.sim.plots import plot_replay

        plot_replay(plot_path, results, f"{pods_path.stem}, speedup {speedup:g}, nodes x{node_fraction:g}")
    if as_json:
        objects = [r.to_json() for r in results]
        click.echo(json.dumps(objects[0] if len(objects) == 1 else objects))
        return
    table(f"replay: {pods_path.stem}, speedup {speedup:g}, nodes x{node_fraction:g}",
          ["policy", "tasks", "never ran", "GPU % while arriving", "wait p50 s", "wait p95 s", "wait p99 s",
           "last start h", "makespan h"],
          [(r.policy, r.started, r.never_started, r.mean_util_arrivals_pct, r.wait_pct(50), r.wait_pct(95),
            r.wait_pct(99), round(r.last_start_s / 3600, 2), round(r.makespan_s / 3600, 2)) for r in results])


if __name__ == "__main__":  # pragma: no cover
    simulate()
