"""Figures for the simulator's results (matplotlib, headless), drawn as the FGD paper draws them.

Packing: GPU allocation % against arrived workload % of capacity, one line per policy (the mean
over seeds), the paper's published means dashed beside ours, with a zoom on the saturated end
where policies differ. Replay: GPU utilisation and queue length over time, and the wait CDF.
matplotlib is imported here only, lazily, so the rest of the simulator does not need it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nomad_gpu.sim.packing import ARRIVED_MAX_PCT

if TYPE_CHECKING:
    from nomad_gpu.sim.replay import ReplayResult
    from nomad_gpu.sim.report import PackingSummary

_COLOURS = {"random": "#7f7f7f", "best-fit": "#1f77b4", "fgd": "#d62728", "frag-aware": "#2ca02c",
            "first-fit": "#9467bd"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colour(policy: str) -> str | None:
    return _COLOURS.get(policy.removesuffix(" (published)"))


def _series(summary: PackingSummary) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for x, y in enumerate(summary.mean):
        if y is not None:
            xs.append(x)
            ys.append(y)
    return xs, ys


def plot_packing(path: Path, summaries: Sequence[PackingSummary], title: str,
                 published: Sequence[PackingSummary] = ()) -> None:
    plt = _pyplot()
    fig, (full, zoom) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    for ax in (full, zoom):
        ax.plot([0, 100, ARRIVED_MAX_PCT], [0, 100, 100], color="#cccccc", lw=1, ls=":", label="ideal")
        for s in published:
            xs, ys = _series(s)
            ax.plot(xs, ys, ls="--", lw=1.2, color=_colour(s.policy), alpha=0.7, label=s.policy)
        for s in summaries:
            xs, ys = _series(s)
            ax.plot(xs, ys, lw=1.8, color=_colour(s.policy), label=f"{s.policy} (ours, {len(s.seeds)} seeds)")
    full.set_xlim(0, ARRIVED_MAX_PCT)
    full.set_ylim(0, 102)
    full.set_xlabel("arrived workload (% of cluster GPU capacity)")
    full.set_ylabel("GPU allocation (%)")
    full.set_title(title)
    lows = [y for s in (*summaries, *published) for x, y in zip(*_series(s), strict=True) if x >= 90]
    zoom.set_xlim(90, ARRIVED_MAX_PCT)
    zoom.set_ylim((min(lows) - 1) if lows else 80, 100.5)
    zoom.set_xlabel("arrived workload (%), saturated end")
    zoom.set_title("zoom")
    zoom.legend(fontsize=7, loc="lower right")
    for ax in (full, zoom):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_replay(path: Path, results: Sequence[ReplayResult], title: str) -> None:
    plt = _pyplot()
    fig, (util, queue, waits) = plt.subplots(1, 3, figsize=(14, 4.0))
    horizon = max((max(r.arrivals_s, r.last_start_s) for r in results), default=0.0) * 1.1 / 3600
    for r in results:
        colour = _colour(r.policy)
        hours = [t / 3600 for t in r.times]
        util.plot(hours, r.gpu_util_pct, lw=1, color=colour, label=r.policy)
        queue.plot(hours, r.queue_len, lw=1, color=colour, label=r.policy)
        ws = sorted(w / 3600 for w in r.waits)
        if ws:
            waits.plot(ws, [(i + 1) / len(ws) * 100 for i in range(len(ws))], lw=1.5, color=colour, label=r.policy)
    if horizon > 0:
        util.set_xlim(0, horizon)
        queue.set_xlim(0, horizon)
    util.set_xlabel("time (hours)")
    util.set_ylabel("GPU allocated (%)")
    util.set_title(title)
    queue.set_xlabel("time (hours)")
    queue.set_ylabel("tasks waiting")
    waits.set_xscale("symlog", linthresh=0.01)
    waits.set_xlabel("queue wait (hours)")
    waits.set_ylabel("tasks (%)")
    waits.set_title("wait CDF")
    for ax in (util, queue, waits):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_difference(path: Path, curves: Sequence[tuple[str, Sequence[tuple[int, float]]]], title: str,
                    tolerance: float = 0.0) -> None:
    """Mean allocation of one policy minus another's against arrived %, one line per trace
    (label, [(arrived %, points)]), with the zero line and, if given, the tolerated shortfall."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.8))
    ax.axhline(0.0, color="#888888", lw=1)
    if tolerance:
        ax.axhline(-tolerance, color="#d62728", lw=1, ls=":", label=f"-{tolerance:g} point")
    for label, points in curves:
        ax.plot([x for x, _ in points], [d for _, d in points], lw=1.8, marker=".", ms=3, label=label)
    ax.set_xlabel("arrived workload (% of cluster GPU capacity)")
    ax.set_ylabel("GPU allocation difference (points)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
