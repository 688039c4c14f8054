"""`teams:` is checked at start: cohorts, borrowing and lending limits, and every key named (issue 34)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nomad_gpu.cli.main import main
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import Team
from nomad_gpu.service.config.settings import scheduling_from_mapping

GOOD = {"vision": {"weight": 2, "quota_gpu": 16, "borrow_gpu": 8, "lend_gpu": 12, "cohort": "research"},
        "nlp": {"weight": 1, "quota_gpu": 16, "borrow_gpu": 16, "cohort": "research"}}


def test_the_issues_example_is_read_as_written() -> None:
    fair = scheduling_from_mapping({"teams": GOOD}).fair
    vision = fair.team(Team("vision"))
    assert (vision.quota_gpu, vision.borrow_gpu, vision.lend_gpu, vision.cohort) == (16, 8, 12, "research")
    nlp = fair.team(Team("nlp"))
    assert (nlp.borrow_gpu, nlp.lend_gpu) == (16, None), "a team lends all of its unused quota by default"


@pytest.mark.parametrize(("teams", "message"), [
    ({"a": {"quota_gpu": 4, "quotas_gpu": 8}}, "config: teams: a: unknown key(s) quotas_gpu"),
    ({"a": {"quota_gpu": 4, "borrow_gpu": 2}}, "config: teams: a: borrow_gpu and lend_gpu need a cohort"),
    ({"a": {"quota_gpu": 4, "borrow_gpu": -2, "cohort": "c"}, "b": {"quota_gpu": 1, "cohort": "c"}},
     "config: teams: a: borrow_gpu and lend_gpu must be >= 0"),
    ({"a": {"quota_gpu": 4, "borrow_gpu": "lots", "cohort": "c"}}, "config: teams: a: borrow_gpu: must be a number"),
    ({"a": {"quota_gpu": 4, "lend_gpu": 6, "cohort": "c"}, "b": {"quota_gpu": 1, "cohort": "c"}},
     "config: teams: a: lend_gpu 6 is above quota_gpu 4"),
    ({"a": {"quota_gpu": 4, "cohort": "c"}}, "config: teams: a: cohort: 'c' has no other team"),
    ({"a": {"borrow_gpu": 2, "cohort": "c"}, "b": {"quota_gpu": 1, "cohort": "c"}}, "needs a quota_gpu"),
    ({"a": {"quota_gpu": True}}, "config: teams: a: quota_gpu: must be a number"),
    ({"a": {"cohort": 7, "quota_gpu": 1}}, "config: teams: a: cohort: must be a name"),
])
def test_a_bad_team_is_refused_naming_the_team_and_key(teams: dict, message: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        scheduling_from_mapping({"teams": teams})
    assert message in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_serve_refuses_a_bad_team_with_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"teams": {"vision": {"quota_gpu": 16, "lend_gpu": 20, "cohort": "r"},
                                                "nlp": {"quota_gpu": 16, "cohort": "r"}}}))
    db = tmp_path / "queue.db"
    result = CliRunner().invoke(main, ["serve", "--db", str(db), "--config", str(config)],
                                env={"NOMAD_GPU_TOKEN": "", "NOMAD_ADDR": "http://127.0.0.1:1"})
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error: ") and "teams: vision: lend_gpu 20 is above quota_gpu 16" in last, last
    assert "Traceback" not in result.output
    assert not db.exists()


def test_with_cohorts_a_token_for_a_team_not_under_teams_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    tokens = {"s3cret-token-for-vision-1": {"team": "vison"}}
    config.write_text(yaml.safe_dump({"teams": GOOD, "api": {"tokens": tokens}}))
    db = tmp_path / "queue.db"
    result = CliRunner().invoke(main, ["serve", "--db", str(db), "--config", str(config)],
                                env={"NOMAD_GPU_TOKEN": "", "NOMAD_ADDR": "http://127.0.0.1:1"})
    assert result.exit_code == 2, result.output
    assert "api: tokens: team(s) vison not under teams:" in result.output.strip().splitlines()[-1]
    assert not db.exists()
