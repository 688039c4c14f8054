"""The fitter: find a concrete placement for every ask of a job, or a ranked reason why not.

Candidates come from the free-capacity index, a bounded number per shape class (or every node in
priority order for exhaustive policies); CPU, memory, datacenter, node pool and head-of-line holds
are checked first (`fitwhy.py`, which also says why not); the policy scores what is left. Gang jobs
place their asks one after another on staged copies of the nodes, so two groups of one job never
count the same GPU twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from nomad_gpu.domain.fitwhy import Scan, passes, shape, why_not
from nomad_gpu.domain.fragmentation import Demand
from nomad_gpu.domain.freeindex import FreeIndex, NodeFree
from nomad_gpu.domain.ids import NodeId
from nomad_gpu.domain.placement import AllocPlacement, NoFit, WaitReason
from nomad_gpu.domain.policies import Option, Policy, options
from nomad_gpu.domain.requests import AllocAsk, JobRequest
from nomad_gpu.domain.scoring import ScoreMemo, best_option, best_option_at, best_score, option_at
from nomad_gpu.domain.topochoice import gpu_set_link

SCAN_CAP_PER_CLASS = 256
"""Nodes looked at per shape class before giving up on it (bounds a decision's cost)."""
CLASSES_TIGHT, CLASSES_ROOMY = 6, 2
"""With many classes (shares have up to 1000), score the tightest few and the roomiest few."""
_MISS = -float("inf")
"""Stands for "not in the memo" (no score is -inf)."""


@dataclass(frozen=True)
class FitContext:
    policy: Policy
    demand: Demand | None = None
    blocked: frozenset[NodeId] = frozenset()
    """Nodes held for another job at the head of the queue."""
    per_class_limit: int | None = 4
    """Feasible nodes scored per shape class; None = all of them (the simulator's exact mode)."""
    rank: Mapping[NodeId, int] | None = None
    """Node priority for ties (lower wins); None = the index's own order."""
    memo: ScoreMemo | None = None
    """Scores of pure policies by node state, kept across decisions (the simulator's speed-up);
    valid for one policy and one demand only."""
    slack: float | None = None
    """GPU-equivalents the job may take beyond its cheapest alternatives before its team's quota;
    None: no quota. Alternatives that would go past it are not offered."""


@dataclass
class Fitter:
    index: FreeIndex
    ctx: FitContext
    staged: dict[NodeId, NodeFree] = field(default_factory=dict)

    def fit_job(self, job: JobRequest) -> tuple[AllocPlacement, ...] | NoFit:
        """Place every ask of `job` (gang), or none. Leaves the index untouched."""
        self.staged = {}
        if job.one_node and len(job.asks) > 1:
            return self._fit_one_node(job)
        placed: list[AllocPlacement] = []
        for ask in job.asks:
            got = self.fit_ask(job, ask)
            if isinstance(got, NoFit):
                if len(job.asks) > 1:
                    return NoFit(got.reason, f"group {ask.group!r}: {got.detail}")
                return got
            placed.append(got)
            nf = self._node(got.node)
            assert nf is not None
            self.staged[got.node] = nf.take(got)
        return tuple(placed)

    def _fit_one_node(self, job: JobRequest) -> tuple[AllocPlacement, ...] | NoFit:
        """Gang on one node: nodes that can host the first ask, best first, until all asks fit."""
        first, rest = job.asks[0], job.asks[1:]
        scan = Scan()
        hosts: list[NodeFree] = []
        scores: list[float] = []
        for nf in self._hosts_of(job, first, scan):
            score = self._node_score(nf, first)
            if score is not None:
                hosts.append(nf)
                scores.append(score)
        normalised = self.ctx.policy.normalise(scores) if scores else scores
        keyed = [((score, -self._rank(nf.id)), nf) for score, nf in zip(normalised, hosts, strict=True)]
        ranked = sorted(keyed, key=lambda kv: kv[0], reverse=True)
        tried: set[NodeId] = set()
        for _, nf in ranked:
            if nf.id in tried:
                continue
            tried.add(nf.id)
            only = Fitter(self.index, self.ctx)
            only.staged = {}
            placed: list[AllocPlacement] = []
            node = nf
            for ask in (first, *rest):
                got = only._fit_on(job, ask, node)
                if got is None:
                    break
                placed.append(got)
                node = node.take(got)
            else:
                return tuple(placed)
        if not ranked:
            why = why_not(self.index, first, scan, bool(self.staged))
            return NoFit(why.reason, f"group {first.group!r}: {why.detail}")
        return NoFit(WaitReason.GANG, f"no single node fits all {len(job.asks)} task groups")

    def _hosts_of(self, job: JobRequest, ask: AllocAsk, scan: Scan) -> Iterator[NodeFree]:
        """`_candidates` for every alternative of the ask, each node once."""
        if not ask.tiers:
            yield from self._candidates(job, ask, scan)
            return
        seen: set[NodeId] = set()
        for alt in ask.alternatives():
            for nf in self._candidates(job, alt, scan):
                if nf.id not in seen:
                    seen.add(nf.id)
                    yield nf

    def _node_score(self, nf: NodeFree, ask: AllocAsk) -> float | None:
        """The node's score for the ask: over the alternatives of its first tier that fits here."""
        policy, demand = self.ctx.policy, self.ctx.demand
        if not ask.tiers:
            return best_score(policy, nf, ask, demand)
        for tier in self._tiers(ask):
            scores = [s for alt in tier if (s := best_score(policy, nf, alt, demand)) is not None]
            if scores:
                return max(scores)
        return None

    def _fit_on(self, job: JobRequest, ask: AllocAsk, nf: NodeFree) -> AllocPlacement | None:
        if not passes(job, ask, nf, self.ctx.blocked, Scan()):
            return None
        policy, demand = self.ctx.policy, self.ctx.demand
        if not ask.tiers:
            opt = best_option(policy, nf, ask, demand)
            return None if opt is None else self._placement(ask, nf, opt)
        tiers = self._tiers(ask)
        for t, tier in enumerate(tiers, start=1):
            best: tuple[float, AllocAsk, Option] | None = None
            for alt in tier:
                got = best_option(policy, nf, alt, demand)
                if got is not None:
                    score = policy.score(nf, alt, got, demand)
                    if best is None or score > best[0]:
                        best = (score, alt, got)
            if best is not None:
                return self._noted(self._placement(best[1], nf, best[2]), best[1], t, len(tiers), [])
        return None

    def _placement(self, ask: AllocAsk, nf: NodeFree, opt: Option) -> AllocPlacement:
        return AllocPlacement(
            group=ask.group, index=ask.index, node=nf.id, cpu_mhz=ask.cpu_mhz, memory_mb=ask.memory_mb,
            instance_ids=opt.instance_ids, device_name=opt.device_name, share_milli=opt.share_milli,
            gpu_equivalents=ask.gpu_equivalents, share_gpu=opt.share_gpu,
            kind=ask.gpu.kind.name if ask.gpu is not None else "", link=gpu_set_link(nf.node, opt.instance_ids),
        )

    # ---- asks with alternatives --------------------------------------------------------------
    def _tiers(self, ask: AllocAsk) -> list[list[AllocAsk]]:
        """The ask's tiers as one-option asks, without the alternatives its quota rules out."""
        slack, cheapest = self.ctx.slack, ask.gpu_equivalents
        return [[ask.one_option(g) for g in tier if slack is None or g.gpu_equivalents - cheapest <= slack + 1e-9]
                for tier in ask.tiers]

    @staticmethod
    def _noted(p: AllocPlacement, alt: AllocAsk, tier: int, tiers: int, lacks: list[str]) -> AllocPlacement:
        what = alt.gpu.describe() if alt.gpu is not None else "no GPU"
        why = f"; {'; '.join(lacks)}" if lacks else ""
        return replace(p, tier=tier, note=f"tier {tier} of {tiers}: {what}{why}")

    def _fit_tiers(self, job: JobRequest, ask: AllocAsk) -> AllocPlacement | NoFit:
        """The first tier with a feasible option wins; within it, the score chooses the alternative
        and the node together, as it chooses nodes for a one-option ask."""
        tiers = self._tiers(ask)
        lacks: list[str] = []
        first: NoFit | None = None
        for t, tier in enumerate(tiers, start=1):
            if not tier:
                lacks.append(f"tier {t}: over the team's quota")
                continue
            got = self._fit_among(job, tier)
            if isinstance(got, NoFit):
                first = first or got
                lacks.append(f"tier {t}: {got}")
                continue
            placement, alt = got
            return self._noted(placement, alt, t, len(tiers), lacks)
        return NoFit(first.reason if first is not None else WaitReason.QUOTA, "; ".join(lacks))

    def _fit_among(self, job: JobRequest, alts: list[AllocAsk]) -> tuple[AllocPlacement, AllocAsk] | NoFit:
        """Every alternative's candidates scored alike, normalised together, the highest taken (ties to
        the better rank, then to the earlier alternative)."""
        if len(alts) == 1:
            one = self.fit_ask(job, alts[0])
            return one if isinstance(one, NoFit) else (one, alts[0])
        policy, demand = self.ctx.policy, self.ctx.demand
        hosts: list[NodeFree] = []
        scores: list[float] = []
        which: list[int] = []
        scans: list[Scan] = []
        for i, alt in enumerate(alts):
            scan = Scan()
            scans.append(scan)
            for nf in self._candidates(job, alt, scan):
                got = best_score(policy, nf, alt, demand)
                if got is not None:
                    hosts.append(nf)
                    scores.append(got)
                    which.append(i)
        if not hosts:
            whys = [why_not(self.index, alt, scan, bool(self.staged)) for alt, scan in zip(alts, scans, strict=True)]
            return NoFit(whys[0].reason, " or ".join(why.detail for why in whys))
        best = self._highest(hosts, policy.normalise(scores))
        alt = alts[which[best]]
        return self._chosen(alt, hosts[best]), alt

    def fit_ask(self, job: JobRequest, ask: AllocAsk) -> AllocPlacement | NoFit:
        """Each candidate's best option, node scores normalised by the policy, then the highest
        (ties to the better rank; the first seen among nodes without a rank)."""
        if ask.tiers:
            return self._fit_tiers(job, ask)
        scan = Scan()
        policy, demand, memo = self.ctx.policy, self.ctx.demand, self.ctx.memo
        if not policy.pure:
            memo = None
        table = memo.table(ask) if memo is not None else None
        if table is not None and self.ctx.per_class_limit is None and not self.staged:
            return self._fit_states(job, ask, table, scan)
        hosts: list[NodeFree] = []
        scores: list[float] = []
        for nf in self._candidates(job, ask, scan):
            if table is None:
                got = best_score(policy, nf, ask, demand)
            else:
                sig = nf.signature()
                got = table.get(sig, _MISS)
                if got == _MISS:
                    got = table[sig] = best_score(policy, nf, ask, demand)
                    memo.note(1)  # type: ignore[union-attr]
            if got is not None:
                hosts.append(nf)
                scores.append(got)
        if not hosts:
            return why_not(self.index, ask, scan, bool(self.staged))
        nf = hosts[self._highest(hosts, policy.normalise(scores))]
        return self._chosen(ask, nf)

    def _chosen(self, ask: AllocAsk, nf: NodeFree) -> AllocPlacement:
        policy, memo = self.ctx.policy, self.ctx.memo
        if memo is None or not (policy.pure and policy.prefer_pure):
            opt = best_option(policy, nf, ask, self.ctx.demand)
            assert opt is not None  # it scored, so it has an option
            return self._placement(ask, nf, opt)
        choices = memo.choices(ask)
        key = (nf.signature(), nf.node.cpu_mhz, len(nf.node.migs))
        position = choices.get(key)
        if position is None:
            got = best_option_at(policy, nf, ask, self.ctx.demand)
            assert got is not None  # it scored, so it has an option
            position, opt = got
            choices[key] = position
            memo.note(1)
        else:
            opt = option_at(nf, ask, position)
        return self._placement(ask, nf, opt)

    def _fit_states(self, job: JobRequest, ask: AllocAsk, table: dict[str, float | None],
                    scan: Scan) -> AllocPlacement | NoFit:
        """Exact mode for a pure policy, by node state: nodes with the same `signature()` score alike,
        so each state is scored once (memoised across decisions) and only its best-ranked node
        competes. Same choice as scoring every node; a long simulation depends on it for speed."""
        policy, demand, memo = self.ctx.policy, self.ctx.demand, self.ctx.memo
        blocked = self.ctx.blocked
        states: dict[str, list[NodeFree]] = {}
        for nf in self._all_candidates(ask):
            if not nf.offered:
                continue
            node = nf.node
            if not job.places_on(node):
                scan.elsewhere += 1
                continue
            if blocked and nf.id in blocked:
                scan.blocked += 1
                continue
            sig = nf.signature()
            same = states.get(sig)
            if same is None:
                states[sig] = [nf]
            else:
                same.append(nf)
        hosts: list[NodeFree] = []
        scores: list[float] = []
        for sig, members in states.items():
            first = members[0]
            if first.cpu_free < ask.cpu_mhz or first.mem_free < ask.memory_mb:
                if ask.gpu is None or next(options(first, ask), None) is not None:
                    scan.short_of_resources += len(members)
                continue
            got = table.get(sig, _MISS)
            if got == _MISS:
                got = table[sig] = best_score(policy, first, ask, demand)
                if memo is not None:
                    memo.note(1)
            if got is not None:
                hosts += members
                scores += [got] * len(members)
        if not hosts:
            return why_not(self.index, ask, scan, bool(self.staged))
        return self._chosen(ask, hosts[self._highest(hosts, policy.normalise(scores))])

    def _all_candidates(self, ask: AllocAsk) -> Iterator[NodeFree]:
        """Every node that could host the ask's GPU shape (every node for CPU-only asks), unchecked."""
        if ask.gpu is None:
            yield from self.index.nodes()
            return
        kind, need, names = shape(self.index, ask)
        seen: set[NodeId] | None = set() if len(names) > 1 else None
        for name in names:
            for _, members in self.index.classes(kind, name, need):
                for node_id in members:
                    if seen is not None:
                        if node_id in seen:
                            continue
                        seen.add(node_id)
                    nf = self.index.get(node_id)
                    if nf is not None:
                        yield nf

    def _highest(self, hosts: list[NodeFree], scores: Sequence[float]) -> int:
        """Index of the highest score, ties to the better rank, then to the first seen (ranks are
        looked up only on ties: most candidates lose on score alone)."""
        best, top, best_rank = 0, scores[0], -1
        for i in range(1, len(hosts)):
            score = scores[i]
            if score < top:
                continue
            if score > top:
                best, top, best_rank = i, score, -1
                continue
            if best_rank < 0:
                best_rank = self._rank(hosts[best].id)
            rank = self._rank(hosts[i].id)
            if rank < best_rank:
                best, best_rank = i, rank
        return best

    # ---- candidates --------------------------------------------------------------------------
    def _node(self, node: NodeId) -> NodeFree | None:
        return self.staged.get(node) or self.index.get(node)

    def _rank(self, node: NodeId) -> int:
        if self.ctx.rank is not None:
            return self.ctx.rank.get(node, len(self.ctx.rank))
        return self.index.rank(node)

    def _candidates(self, job: JobRequest, ask: AllocAsk, scan: Scan) -> Iterator[NodeFree]:
        """Nodes that pass the basic checks: a bounded few per shape class, or all (exhaustive)."""
        g = ask.gpu
        if self.ctx.policy.exhaustive or g is None:
            for nf in sorted(self.index.nodes(), key=lambda n: self._rank(n.id)):
                nf = self.staged.get(nf.id, nf)
                if passes(job, ask, nf, self.ctx.blocked, scan):
                    yield nf
            return
        kind, need, names = shape(self.index, ask)
        limit = self.ctx.per_class_limit
        seen: set[NodeId] = set()
        # the hot loop of every decision: names bound once
        in_stage, lookup, blocked = self.staged, self.index.get, self.ctx.blocked
        for name in names:
            for members in self._classes(kind, name, need):
                yielded = scanned = 0
                for node_id in members:
                    if node_id in seen or node_id in in_stage:
                        continue  # staged nodes are offered below, as this job's earlier asks left them
                    seen.add(node_id)
                    scanned += 1
                    found = lookup(node_id)
                    if found is not None and passes(job, ask, found, blocked, scan):
                        yield found
                        yielded += 1
                    if limit is not None and (yielded >= limit or scanned >= SCAN_CAP_PER_CLASS):
                        break
        # nodes staged by this job's earlier asks may now sit in a different class: offer them too
        for node_id, staged in self.staged.items():
            if node_id not in seen and passes(job, ask, staged, self.ctx.blocked, scan):
                yield staged

    def _classes(self, kind: str, name: str, need: int) -> list[dict[NodeId, None]]:
        classes = [members for _, members in self.index.classes(kind, name, need)]
        if self.ctx.per_class_limit is None or len(classes) <= CLASSES_TIGHT + CLASSES_ROOMY:
            return classes
        return classes[:CLASSES_TIGHT] + classes[-CLASSES_ROOMY:]
