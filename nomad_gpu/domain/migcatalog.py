"""Which MIG profiles a GPU model offers, and how many instances of each fit on one GPU.

A GPU in MIG mode can be re-laid out (DESIGN 15), so what a fleet could ever offer is not only the
instances Nomad reports now but every profile its MIG-mode models support. The names and per-GPU
maxima are NVIDIA's MIG user guide's supported-profile tables (v580: Tables 6-11); a model this table
does not know offers only the profiles its GPUs report.
"""

from __future__ import annotations

import re

from nomad_gpu.domain.units import MigProfile

# slices of a 7-slice GPU an instance of each kind takes, and the most of them one GPU holds
_SEVEN = {"1g": 7, "1g+me": 1, "1g2": 4, "2g": 3, "3g": 2, "4g": 1, "7g": 1}
_FOUR = {"1g": 4, "1g+me": 1, "2g": 2, "2g+me": 1, "4g": 1}


def _seven(one: int, two: int, three: int, full: int) -> dict[str, int]:
    """The A100/H100/H200/B200 family: profile memory sizes 1g, 1g-2x/2g, 3g/4g and 7g."""
    names = {"1g": f"1g.{one}gb", "1g+me": f"1g.{one}gb+me", "1g2": f"1g.{two}gb", "2g": f"2g.{two}gb",
             "3g": f"3g.{three}gb", "4g": f"4g.{three}gb", "7g": f"7g.{full}gb"}
    return {names[k]: _SEVEN[k] for k in names}


_A30 = {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1}

# (pattern over the upper-cased model name, profiles); the first match decides
_CATALOG: tuple[tuple[re.Pattern[str], dict[str, int]], ...] = (
    (re.compile(r"A100.*80\s*GB"), _seven(10, 20, 40, 80)),
    (re.compile(r"A100"), _seven(5, 10, 20, 40)),
    (re.compile(r"A30\b"), _A30),
    (re.compile(r"H100.*(NVL|94\s*GB)"), _seven(12, 24, 47, 94)),
    (re.compile(r"H100.*96\s*GB|GH200"), _seven(12, 24, 48, 96)),
    (re.compile(r"H100"), _seven(10, 20, 40, 80)),
    (re.compile(r"H200"), _seven(18, 35, 71, 141)),
    (re.compile(r"GB200"), _seven(23, 47, 93, 186)),
    (re.compile(r"B200"), _seven(23, 45, 90, 180)),
)


def profiles_of(model: str) -> dict[str, int]:
    """Profile name -> the most instances of it one GPU of ``model`` holds; empty for an unknown model."""
    upper = model.upper()
    for pattern, profiles in _CATALOG:
        if pattern.search(upper):
            return dict(profiles)
    return {}


def per_gpu(model: str, profile: str) -> int:
    """The most instances of ``profile`` one GPU of ``model`` holds: the catalogue's, else (a model it
    does not know) what the profile's size allows on a 7-slice GPU."""
    known = profiles_of(model)
    if known:
        return known.get(profile, 0)
    try:
        slices = MigProfile.parse(profile).compute_slices
    except ValueError:
        return 0
    return 1 if "+" in profile else max(7 // max(slices, 1), 0)
