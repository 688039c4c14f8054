"""Expand a sweep spec into one job spec per trial: the job array Nomad lacks.

Each trial is an ordinary :class:`JobSpec` (so it queues, is admitted and renders
like any job) named ``<name>-t<idx>``, carrying its parameters twice: as job meta
``nomad_gpu_trial_<param>`` (visible in the Nomad UI and to the watcher) and as env
``TRIAL_<PARAM>`` in every task (what the training script reads). Expansion is pure
and deterministic: the same spec always yields the same trials in the same order.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator, Mapping, Sequence

from pydantic import ValidationError

from nomad_gpu.render.spec import META_SWEEP, META_TRIAL, META_TRIAL_PREFIX, JobSpec, SpecError, SweepSpec
from nomad_gpu.render.specfields import SweepValue
from nomad_gpu.render.sweepconfig import SweepRange

__all__ = [
    "META_SWEEP",
    "META_TRIAL",
    "META_TRIAL_PREFIX",
    "expand_sweep",
    "format_sweep_value",
    "trial_parameters",
]

ENV_TRIAL_PREFIX = "TRIAL_"
"""Task env prefix: one variable per parameter, ``TRIAL_<PARAM>``."""


def format_sweep_value(value: SweepValue) -> str:
    """A parameter value as the text a task sees: ``0.001``, ``64``, ``true``, ``adam``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def trial_parameters(spec: SweepSpec) -> list[dict[str, SweepValue]]:
    """The parameter combination of every trial, in trial order.

    grid: the cartesian product in the order the parameters and values are written
    (the last parameter varies fastest). random: ``trials`` distinct combinations
    drawn with ``random.Random(seed)``, so a seed always gives the same trials; a
    range parameter (``{min, max, log, int}``) is sampled from, uniformly or in log space.
    """
    names = list(spec.sweep.parameters)
    given = [spec.sweep.parameters[name] for name in names]
    lists = [v for v in given if not isinstance(v, SweepRange)]
    if spec.sweep.mode == "grid":
        return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*lists)]
    rng = random.Random(spec.sweep.seed)
    if len(lists) == len(given):  # lists only: distinct combinations, as drawn before ranges existed
        picks = rng.sample(range(spec.sweep.grid_size), spec.sweep.trial_count)
        return [dict(zip(names, _combination(lists, pick), strict=True)) for pick in picks]
    return _sampled(names, given, spec.sweep.trial_count, rng)


def _sampled(names: list[str], given: Sequence[Sequence[SweepValue] | SweepRange], trials: int,
             rng: random.Random) -> list[dict[str, SweepValue]]:
    """``trials`` distinct combinations, each parameter drawn on its own: a list's values uniformly, a
    range as it says. A repeat is drawn again (validation ensures there are enough distinct ones; with a
    small space the tries are bounded, then the rest of the space is walked in a seeded order)."""
    seen: set[tuple[SweepValue, ...]] = set()
    out: list[dict[str, SweepValue]] = []
    tries = 0
    while len(out) < trials and tries < 20 * trials:
        tries += 1
        combo = tuple(_draw(v, rng) for v in given)
        if combo not in seen:
            seen.add(combo)
            out.append(dict(zip(names, combo, strict=True)))
    if len(out) < trials:  # a nearly exhausted finite space: take what is left, in a seeded order
        finite = [list(v) if not isinstance(v, SweepRange) else _integers(v) for v in given]
        rest = [c for c in itertools.product(*finite) if c not in seen]
        rng.shuffle(rest)
        out += [dict(zip(names, c, strict=True)) for c in rest[:trials - len(out)]]
    return out


def _draw(values: Sequence[SweepValue] | SweepRange, rng: random.Random) -> SweepValue:
    if not isinstance(values, SweepRange):
        return values[rng.randrange(len(values))]
    low, high = values.min, values.max
    if values.integer:
        if values.log:  # log-uniform over [min, max + 1), floored: every integer reachable, small ones likelier
            return min(int(math.exp(rng.uniform(math.log(low), math.log(high + 1)))), int(high))
        return rng.randint(int(low), int(high))
    if values.log:
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    return rng.uniform(low, high)


def _integers(values: SweepRange) -> list[SweepValue]:
    return list(range(int(values.min), int(values.max) + 1))


def _combination(values: Sequence[Sequence[SweepValue]], index: int) -> Iterator[SweepValue]:
    """The ``index``-th combination of the grid (same order as itertools.product)."""
    digits: list[SweepValue] = []
    for options in reversed(values):
        index, digit = divmod(index, len(options))
        digits.append(options[digit])
    return reversed(digits)


def expand_sweep(spec: SweepSpec) -> list[JobSpec]:
    """One validated :class:`JobSpec` per trial, in trial order (index = position)."""
    base = spec.model_dump(exclude={"kind", "sweep"})
    jobs: list[JobSpec] = []
    for index, params in enumerate(trial_parameters(spec)):
        data = dict(base)
        data["name"] = f"{spec.name}-t{index}"
        data["meta"] = {**base["meta"], **_trial_meta(spec.name, index, params)}
        env = {f"{ENV_TRIAL_PREFIX}{name.upper()}": format_sweep_value(v) for name, v in params.items()}
        data["groups"] = [
            {**group, "task": {**group["task"], "env": {**group["task"]["env"], **env}}} for group in base["groups"]
        ]
        try:
            jobs.append(JobSpec.model_validate(data))
        except ValidationError as exc:  # the sweep validated, so this is a bug, not bad input
            first = exc.errors()[0]
            raise SpecError(f"trial {index} of sweep {spec.name!r} is invalid: {first['msg']}") from exc
    return jobs


def _trial_meta(sweep: str, index: int, params: Mapping[str, SweepValue]) -> dict[str, str]:
    meta = {META_SWEEP: sweep, META_TRIAL: str(index)}
    meta.update({f"{META_TRIAL_PREFIX}{name}": format_sweep_value(v) for name, v in params.items()})
    return meta
