"""Hypothesis profiles: `dev` (default) and `ci` (derandomized, so CI runs are reproducible).

Pick one with `HYPOTHESIS_PROFILE=ci`. Neither has a deadline: property tests assert behaviour, never
speed (STYLE habit 7).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
