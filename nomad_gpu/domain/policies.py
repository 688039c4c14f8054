"""Placement policies: given a node that can host an ask, which instances to use and how good it is.

A policy never decides feasibility of CPU, memory, datacenter or reservations (the fitter does) and
never reads anything but the node's free state and the demand. It returns `Option`s with scores;
the fitter keeps each node's best option (by `score`, then `prefer`, then device order), lets the
policy `normalise` the node scores across all candidates, and takes the highest, ties going to the
node with the better priority rank. Policies:

- `first-fit`: the first node in priority order; a baseline.
- `best-fit`, `fgd`, `random`: the FGD paper's baselines, exactly as its simulator scores them
  (see `baselines`), so a packing result can be paired with the published ones.
- `frag-aware` (default): fragmentation gradient on the expected demand, scored in full precision,
  with the paper's integer score as its first key (see `fragaware`).
"""

from __future__ import annotations

from collections.abc import Mapping

from nomad_gpu.domain.baselines import BestFit, Fgd, RandomPick
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.fragaware import FragAware
from nomad_gpu.domain.fragmentation import Demand
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.requests import AllocAsk
from nomad_gpu.domain.scoring import BasePolicy, Option, Policy, gpu_state_after, left_after, options

__all__ = ["DEFAULT_POLICY", "POLICIES", "BasePolicy", "BestFit", "Fgd", "FirstFit", "FragAware", "Option",
           "Policy", "RandomPick", "get_policy", "gpu_state_after", "left_after", "options"]


class FirstFit(BasePolicy):
    name = "first-fit"
    exhaustive = True

    def score(self, nf: NodeFree, ask: AllocAsk, opt: Option, demand: Demand | None) -> float:
        return 0.0


POLICIES: Mapping[str, type[BasePolicy]] = {
    p.name: p for p in (FirstFit, BestFit, Fgd, RandomPick, FragAware)
}
DEFAULT_POLICY = "frag-aware"


def get_policy(name: str, *, seed: int = 0) -> Policy:
    """A fresh policy by name; `seed` feeds the policies that draw at random (`random`)."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise InvalidRequest(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None
    return cls.create(seed=seed)
