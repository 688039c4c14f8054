"""Fixtures for the render tests."""

from __future__ import annotations

import pytest

from nomad_gpu.render import parse_hcl


@pytest.fixture(scope="session", autouse=True)
def warm_hcl_parser() -> None:
    """python-hcl2 builds its grammar on the first parse (about a second): do it once."""
    parse_hcl('warm = "up"\n')
