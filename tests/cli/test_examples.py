"""`nomad-gpu example`: the example specs travel with the package, list, print, and refuse an unknown name."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nomad_gpu import bundled
from nomad_gpu.cli.main import main
from nomad_gpu.render import load_spec

REPO = Path(__file__).resolve().parents[2]
REQUIRED = ("train", "train-multi", "gang", "sweep", "inference-mig", "notebook-share", "serving-openai",
            "notebook-reachable")


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_every_required_example_is_shipped_and_one_per_file() -> None:
    assert set(REQUIRED) <= set(bundled.examples())
    assert bundled.examples() == sorted(p.stem for p in (REPO / "jobspecs").glob("*.yaml"))


def test_no_name_lists_them_with_what_each_shows() -> None:
    code, out, _ = run("example")
    assert code == 0
    rows = dict(line.split("\t", 1) for line in out.strip().splitlines()[1:])
    assert set(rows) == set(bundled.examples())
    assert rows["train"] == "One training job on one whole GPU."


@pytest.mark.parametrize("name", bundled.examples())
def test_each_prints_as_shipped_and_is_a_valid_spec(name: str, tmp_path: Path) -> None:
    code, out, _ = run("example", name)
    assert code == 0
    assert out == (REPO / "jobspecs" / f"{name}.yaml").read_text(encoding="utf-8")
    (tmp_path / "spec.yaml").write_text(out)
    spec = load_spec(tmp_path / "spec.yaml")
    assert spec.runtime is not None, "an example shows runtime:, so that what waits behind it has an ETA"


def test_an_unknown_name_is_exit_2_with_the_list() -> None:
    code, _, err = run("example", "trian")
    assert code == 2
    assert err.strip() == f"error: no example 'trian' (examples: {', '.join(bundled.examples())})"


def test_the_dev_banner_works_from_an_empty_directory() -> None:
    """The banner's suggestion needs no checkout: it starts from `nomad-gpu example`."""
    source = (REPO / "nomad_gpu" / "cli" / "runcmds.py").read_text(encoding="utf-8")
    banner = source[source.index("export NOMAD_GPU_ADDR="):source.index("Ctrl-C stops both.")]
    assert "jobspecs/" not in banner and "nomad-gpu example train > train.yaml" in banner
