"""`nomad-gpu simulate`: JSON shape, plots, and one-line errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nomad_gpu.cli.simulate import parse_seeds, simulate


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(simulate, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_packing_json_has_the_documented_fields(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = tiny
    png = tmp_path / "alloc.png"
    code, out, err = run("packing", "--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd",
                         "--seeds", "42-43", "--workers", "1", "--json", "--plot", str(png))
    assert code == 0, err
    got = json.loads(out)
    assert got["policy"] == "fgd" and got["seeds"] == [42, 43]
    assert got["arrived_pct"] == list(range(131))
    assert len(got["alloc_pct_mean"]) == 131 and set(got["alloc_pct_by_seed"]) == {"42", "43"}
    assert all(len(v) == 131 for v in got["alloc_pct_by_seed"].values())
    at_130 = got["alloc_pct_mean"][130]  # a six-GPU cluster may have no event near 130 %: null then
    assert got["unallocated_pct_at_130"] == (None if at_130 is None else pytest.approx(100 - at_130))
    assert png.stat().st_size > 10_000


def test_packing_several_policies_pairs_them_with_fgd(tiny: tuple[Path, Path]) -> None:
    nodes, pods = tiny
    code, out, err = run("packing", "--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd",
                         "--policy", "frag-aware", "--seeds", "42", "--workers", "1", "--json")
    assert code == 0, err
    fgd, ours = json.loads(out)
    assert (fgd["policy"], ours["policy"]) == ("fgd", "frag-aware")
    assert set(ours["paired_vs_fgd"]) >= {"mean_diff_points", "wins", "losses", "diff_by_seed"}


def test_replay_json_and_plot(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = tiny
    png = tmp_path / "replay.png"
    code, out, err = run("replay", "--nodes", str(nodes), "--pods", str(pods), "--policy", "frag-aware",
                         "--json", "--plot", str(png))
    assert code == 0, err
    got = json.loads(out)
    assert got["tasks_started"] == 11 and got["tasks_left_out"] == 1
    assert set(got["wait_s"]) == {"mean", "p50", "p95", "p99"} and got["makespan_s"] > 0
    assert png.stat().st_size > 10_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["packing", "--seeds", "51-42"], "bad seed range", id="reversed-seeds"),
        pytest.param(["packing", "--seeds", "x"], "bad seed range", id="junk-seeds"),
        pytest.param(["packing", "--policy", "worst-fit"], "unknown policy 'worst-fit'", id="unknown-policy"),
        pytest.param(["packing", "--pods", "/nonexistent/pods.csv"], "task list file not found", id="missing-pods"),
        pytest.param(["replay", "--nodes", "/nonexistent/n.csv"], "node list file not found", id="missing-nodes"),
        pytest.param(["replay", "--speedup", "0"], "speedup must be > 0", id="bad-speedup"),
        pytest.param(["packing", "--tune", "-1"], "--tune must be within", id="bad-tune"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    code, out, err = run(*args)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err + out


def test_bad_csv_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli\nx,1\n")
    code, _, err = run("packing", "--pods", str(bad), "--seeds", "42")
    assert code == 2 and "missing column" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("text", "seeds"), [("42-44", [42, 43, 44]), ("42,50", [42, 50]), ("7", [7])])
def test_parse_seeds(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds
