"""The README's service config is a config the service accepts (every key but the placeholder tokens)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from nomad_gpu.domain.ids import Team
from nomad_gpu.service.config.settings import scheduling_from_mapping

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readmes_service_config_loads() -> None:
    text = README.read_text(encoding="utf-8")
    block = re.search(r"The optional service config \(`--config`\):\n\n```yaml\n(.*?)```", text, re.S)
    assert block, "the README's config block moved: update this test"
    raw = yaml.safe_load(block.group(1))
    raw.pop("api", None)  # its tokens are placeholders (`3f9c2e...`)
    settings = scheduling_from_mapping(raw)
    assert settings.fair.team(Team("nlp")).cohort == "research"
