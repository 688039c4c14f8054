"""Service settings: grouped, built once at the entry point from flags, environment and a file."""

from __future__ import annotations

import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nomad_gpu.defaults import DEFAULT_ADDR, HOL_THRESHOLD_S
from nomad_gpu.domain.classes import ClassPolicy
from nomad_gpu.domain.cycle import CycleConfig
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.fairshare import FairShareConfig
from nomad_gpu.domain.policies import DEFAULT_POLICY, POLICIES
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.nomad.decode import NO_SHARING, ShareRule, SharingConfig
from nomad_gpu.render import SpecError
from nomad_gpu.render.loading import decode_spec
from nomad_gpu.render.sweepconfig import MAX_TRIALS, TRIALS_CEILING
from nomad_gpu.service.config.classconfig import classes_from_mapping
from nomad_gpu.service.config.haconfig import HaSettings, ha_from_mapping
from nomad_gpu.service.config.idleconfig import IdlePolicies, check_rounds, idle_from_classes
from nomad_gpu.service.config.limits import HttpLimits, TeamLimits, http_limits_from_mapping, team_limits_from_mapping
from nomad_gpu.service.config.preemptconfig import TakeBackSettings, take_back_from_config
from nomad_gpu.service.config.runtimes import RuntimeDefaults, runtime_defaults_from_mapping
from nomad_gpu.service.config.teamconfig import check_granted_teams, team_from_mapping, teams_from_mapping
from nomad_gpu.service.config.usageconfig import UsageSettings, usage_from_mapping
from nomad_gpu.service.life.cutoff import DEFAULT_STOP_ON_CLIENT_AFTER_S, stop_on_client_after
from nomad_gpu.service.relayout.config import MigRelayoutConfig, mig_relayout_from_mapping
from nomad_gpu.store.location import redacted

DEFAULT_DRIVERS = frozenset({"docker", "exec"})
"""Task drivers a spec may use unless the config lists others (``raw_exec`` runs unisolated on the host)."""
MIN_TOKEN_CHARS = 16
"""A token written in the config file must be at least this long (e.g. ``openssl rand -hex 16``)."""
_TEAM = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_DRIVER = re.compile(r"[a-z0-9_-]{1,64}")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[?[0-9A-Fa-f:.]{2,45}\]?")


@dataclass(frozen=True)
class SchedulingSettings:
    policy: str = DEFAULT_POLICY
    hol_threshold_s: float = HOL_THRESHOLD_S
    tick_s: float = 5.0
    """A cycle runs on every event that frees or adds capacity, and at least this often."""
    min_cycle_interval_s: float = 0.02
    """Cycles woken by submissions start at least this far apart: what arrives meanwhile joins the next
    one, so a burst costs one cycle and one fsynced commit per batch instead of per job. Freed capacity
    (an allocation ended, a stop confirmed) wakes a cycle at once: a handoff never waits for this."""
    fair: FairShareConfig = field(default_factory=FairShareConfig)
    sharing: SharingConfig = NO_SHARING
    actuator_workers: int = 8
    refusal_avoid_s: float = 300.0
    """After Nomad refuses a placement on a node, the entry avoids that node this long."""
    admission_deadline_s: float = 300.0
    """An admitted entry with no allocation this long after its register is re-queued (the safety net
    behind following Nomad's blocked evaluations)."""
    retention_s: float = 30 * 86400.0
    """Finished entries older than this are deleted from the queue database (0 keeps them forever)."""
    usage: UsageSettings = field(default_factory=UsageSettings)
    """Device stats of running allocations: GPU utilisation per entry, idle GPUs."""
    classes: ClassPolicy = field(default_factory=ClassPolicy)
    """The operator's policy per workload class (`classes:`, service/config/classconfig.py)."""
    idle: IdlePolicies = field(default_factory=lambda: idle_from_classes(None))
    """Idle reclaim per class (`classes.<class>.idle`, service/config/idleconfig.py)."""
    mig_relayout: MigRelayoutConfig = field(default_factory=MigRelayoutConfig)
    """Queue-driven MIG re-layouts (`mig_relayout:`, service/relayout/config.py); off by default."""
    runtime_defaults: RuntimeDefaults = field(default_factory=RuntimeDefaults)
    """Run times an ETA assumes for a spec without `runtime:`, by class then template (service/config/runtimes.py)."""
    local_parse: bool = True
    """`nomad: {local_parse: ...}`: a bundled template's Job JSON is built by the service (render/jobjson.py,
    proven equal to Nomad's parse) instead of asked of `/v1/jobs/parse`; false asks Nomad for every job."""
    ha: HaSettings = field(default_factory=HaSettings)
    """`ha:` (service/config/haconfig.py): the leader's lease when replicas share a PostgreSQL queue."""
    take_back: TakeBackSettings = field(default_factory=TakeBackSettings)
    """Preemption (`preemption:`, the classes' `preempts`/`preemptible`, `nomad.max_kill_timeout`)."""
    service_name: str = "nomad-gpu"
    """Written into every job's meta (`nomad_gpu_service`): two services on one cluster tell their jobs
    apart by it (the job-ID prefix is random per database)."""
    stop_on_client_after_s: float | None = DEFAULT_STOP_ON_CLIENT_AFTER_S
    """`nomad: {stop_on_client_after: 60s}`: GPU groups get `disconnect { stop_on_client_after, replace = false }`
    (null: no block); it also bounds how long a cut-off attempt keeps its GPUs (docs/partitions.md)."""

    def cycle_config(self) -> CycleConfig:
        """The core's view of these settings, for the cycle and for its forecast alike."""
        return CycleConfig(policy=self.policy, hol_threshold_s=self.hol_threshold_s, fair=self.fair,
                           borrow_requires=self.take_back.preemption.borrow_requires)


def _within(wide: frozenset[str], narrow: frozenset[str] | None) -> frozenset[str]:
    if narrow is None:
        return wide
    return narrow if "*" in wide else wide & narrow


GRANT_LISTS = ("node_pools", "datacenters", "namespaces", "drivers")
"""What a token's grant may narrow (each an optional list within the service-wide one)."""


@dataclass(frozen=True)
class Grant:
    """Where one token's submissions may go, within the service-wide lists (None: as the service allows)."""

    node_pools: frozenset[str] | None = None
    datacenters: frozenset[str] | None = None
    namespaces: frozenset[str] | None = None
    drivers: frozenset[str] | None = None


OPEN_GRANT = Grant()


@dataclass(frozen=True)
class AccessSettings:
    """Who may do what through the API (DESIGN 12), and how much one submission may ask for.

    ``tokens`` maps a token to the team it acts for, or to None for an admin token that sees
    every team. With no token at all, every caller is the admin: fine on loopback only, which
    ``serve`` enforces.
    """

    tokens: Mapping[str, str | None] = field(default_factory=lambda: types.MappingProxyType({}))
    allowed_drivers: frozenset[str] = DEFAULT_DRIVERS
    max_trials: int = MAX_TRIALS
    metrics_open: bool = False
    """Serve ``/metrics`` without a token (e.g. for a Prometheus that cannot send one)."""
    namespaces: frozenset[str] = frozenset({"default"})
    """The Nomad namespaces users may submit to; a spec naming another is refused at submit."""
    hosts: frozenset[str] = frozenset()
    """Names (besides loopback and the listen address) a request may give as its ``Host``
    (:mod:`nomad_gpu.service.http.browser`): the names clients reach the service by."""
    http: HttpLimits = field(default_factory=HttpLimits)
    """Connection timeouts and the connection cap."""
    team_limits: TeamLimits = field(default_factory=TeamLimits)
    """What each team may hold at once (entries, stored bytes)."""
    node_pools: frozenset[str] = frozenset({"default"})
    """Nomad node pools a spec may name (none named is Nomad's `default`); ``*`` opens every pool."""
    datacenters: frozenset[str] = frozenset({"*"})
    """Datacenters a spec may name, literally (a glob could reach others); ``*`` is any. A spec that leaves
    them out (any) is given this list when it is not ``*``."""
    grants: Mapping[str, Grant] = field(default_factory=lambda: types.MappingProxyType({}))
    """By token: lists that narrow the four above for that token's submissions."""
    metrics_open_teams: bool = False
    """With ``metrics_open``, show a scrape without a token every team's series; by default it sees them
    summed as ``team="_all"`` (a scrape with a token sees what that token sees)."""
    users: Mapping[str, str] = field(default_factory=lambda: types.MappingProxyType({}))
    """By token: the person it belongs to (`user:`), recorded on what it submits (`report --by user`)."""

    def narrowed(self, grant: Grant) -> AccessSettings:
        """These settings within one token's grant."""
        if grant == OPEN_GRANT:
            return self
        return replace(self, node_pools=_within(self.node_pools, grant.node_pools),
                       datacenters=_within(self.datacenters, grant.datacenters),
                       namespaces=_within(self.namespaces, grant.namespaces),
                       allowed_drivers=_within(self.allowed_drivers, grant.drivers))

    @property
    def required(self) -> bool:
        """Whether a request needs a token."""
        return bool(self.tokens)

    def with_admin(self, token: str | None) -> AccessSettings:
        """These settings plus one admin token (``NOMAD_GPU_TOKEN``)."""
        if not token:
            return self
        return replace(self, tokens=types.MappingProxyType({**self.tokens, token: None}))

    def __repr__(self) -> str:
        teams = sorted({t or "admin" for t in self.tokens.values()})
        return (f"AccessSettings(tokens={len(self.tokens)} for {teams}, "
                f"allowed_drivers={sorted(self.allowed_drivers)}, max_trials={self.max_trials}, "
                f"metrics_open={self.metrics_open}, metrics_open_teams={self.metrics_open_teams}, "
                f"namespaces={sorted(self.namespaces)}, hosts={sorted(self.hosts)})")


@dataclass(frozen=True)
class ServiceSettings:
    nomad: NomadSettings = field(default_factory=NomadSettings)
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)
    db_path: str = "nomad-gpu.db"
    listen: str = DEFAULT_ADDR
    token: str | None = None
    templates_dir: Path | None = None
    access: AccessSettings = field(default_factory=AccessSettings)
    tls_cert: str | None = None
    tls_key: str | None = None
    ignore_existing_jobs: bool = False
    """Start on a new database even though Nomad runs jobs of this service (they are left to Nomad)."""
    adopt_existing_jobs: bool = False
    """Start on a new database and book each live job of this service until it ends (never stopped)."""
    config_path: str | None = None
    """The `--config` file, read again on SIGHUP for its teams and tokens (service/loops/reload.py)."""

    def __repr__(self) -> str:
        return f"ServiceSettings(nomad={self.nomad!r}, db_path={redacted(self.db_path)!r}, listen={self.listen!r})"


def load_scheduling(path: str | None) -> SchedulingSettings:
    """Read the optional YAML config (teams, sharing rules, policy); errors name the file and key."""
    return load_config(path)[0]


def load_config(path: str | None) -> tuple[SchedulingSettings, AccessSettings]:
    """The optional YAML config file: scheduling settings and its ``api:`` section (tokens, drivers)."""
    if not path:
        return SchedulingSettings(), AccessSettings()
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise InvalidRequest(f"{path}: cannot read config ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"{path}: not UTF-8 text") from exc
    try:  # the spec reader's rules: a token written twice must not silently keep the last team
        raw = decode_spec(text).data if text.strip() else {}
    except SpecError as exc:  # the line, not the key: a key written twice may be a token
        message = re.sub(r"duplicate key .*", "a key is written twice", str(exc))
        raise InvalidRequest(f"{path}: not valid YAML ({message})") from exc
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{path}: the config must be a mapping")
    scheduling = scheduling_from_mapping(raw, where=path)
    access = access_from_mapping(raw.get("api") or {}, where=f"{path}: api")
    check_granted_teams(scheduling.fair, access.tokens.values(), f"{path}: api: tokens")
    return scheduling, access


def access_from_mapping(raw: Any, where: str = "api") -> AccessSettings:
    """``api: {tokens: {<token>: {team: vision} | {admin: true}}, allowed_drivers, max_trials, metrics_open,
    metrics_open_teams, ...}``."""
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{where}: must be a mapping")
    unknown = sorted(set(raw) - {"tokens", "allowed_drivers", "max_trials", "metrics_open", "metrics_open_teams",
                                 "namespaces", "hosts", "http", "team_limits", "node_pools", "datacenters"})
    if unknown:
        raise InvalidRequest(f"{where}: unknown key(s) {', '.join(map(str, unknown))}")
    tokens: dict[str, str | None] = {}
    users: dict[str, str] = {}
    narrowing: dict[str, Grant] = {}
    grants = raw.get("tokens") or {}
    if not isinstance(grants, Mapping):
        raise InvalidRequest(f"{where}: tokens: must map each token to {{team: NAME}} or {{admin: true}}")
    for i, (token, grant) in enumerate(grants.items()):
        at = f"{where}: tokens: entry {i + 1}"  # never echo the token itself
        if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS or not token.isprintable() or " " in token:
            raise InvalidRequest(f"{at}: a token must be at least {MIN_TOKEN_CHARS} printable characters, no spaces")
        if not isinstance(grant, Mapping) or set(grant) - {*GRANT_LISTS, "user"} not in ({"team"}, {"admin"}):
            raise InvalidRequest(f"{at}: must be {{team: NAME}} or {{admin: true}}, with optional user, "
                                 f"{', '.join(GRANT_LISTS)} (an unknown key was given, or neither)")
        if "user" in grant:
            if not isinstance(grant["user"], str) or not _TEAM.fullmatch(grant["user"]):
                raise InvalidRequest(f"{at}: user must be a name (1-64 of A-Z, a-z, 0-9, '_', '.', '-')")
            users[token] = grant["user"]
        lists = {key: frozenset(_names(grant[key], f"{at}: {key}")) for key in GRANT_LISTS if key in grant}
        if lists:
            narrowing[token] = Grant(**lists)
        if "admin" in grant:
            if grant["admin"] is not True:
                raise InvalidRequest(f"{at}: admin must be true (leave the token out to revoke it)")
            tokens[token] = None
        elif not isinstance(grant["team"], str) or not _TEAM.fullmatch(grant["team"]):
            raise InvalidRequest(f"{at}: team must be a team name (1-64 of A-Z, a-z, 0-9, '_', '.', '-')")
        else:
            tokens[token] = grant["team"]
    drivers = raw.get("allowed_drivers", sorted(DEFAULT_DRIVERS))
    if not isinstance(drivers, list) or not drivers or not all(isinstance(d, str) and _DRIVER.fullmatch(d)
                                                                  for d in drivers):
        raise InvalidRequest(f"{where}: allowed_drivers: must be a non-empty list of Nomad driver names")
    max_trials = raw.get("max_trials", MAX_TRIALS)
    if isinstance(max_trials, bool) or not isinstance(max_trials, int) or not 1 <= max_trials <= TRIALS_CEILING:
        raise InvalidRequest(f"{where}: max_trials: must be an integer from 1 to {TRIALS_CEILING}")
    metrics_open = raw.get("metrics_open", False)
    if not isinstance(metrics_open, bool):
        raise InvalidRequest(f"{where}: metrics_open: must be true or false")
    open_teams = raw.get("metrics_open_teams", False)
    if not isinstance(open_teams, bool):
        raise InvalidRequest(f"{where}: metrics_open_teams: must be true or false")
    if open_teams and not metrics_open:
        raise InvalidRequest(f"{where}: metrics_open_teams: needs metrics_open: true (it says what a scrape "
                             "without a token sees)")
    namespaces = raw.get("namespaces", ["default"])
    if not isinstance(namespaces, list) or not namespaces or not all(isinstance(n, str) and _TEAM.fullmatch(n)
                                                                      for n in namespaces):
        raise InvalidRequest(f"{where}: namespaces: must be a non-empty list of Nomad namespace names")
    hosts = raw.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) and _HOST.fullmatch(h) for h in hosts):
        raise InvalidRequest(f"{where}: hosts: must be a list of host names or IP addresses (no port, no scheme)")
    wide = {"node_pools": frozenset(_names(raw.get("node_pools", ["default"]), f"{where}: node_pools", True)),
            "datacenters": frozenset(_names(raw.get("datacenters", ["*"]), f"{where}: datacenters", True)),
            "namespaces": frozenset(namespaces), "drivers": frozenset(drivers)}
    for grant in narrowing.values():
        for key in GRANT_LISTS:
            extra = sorted((getattr(grant, key) or frozenset()) - wide[key]) if "*" not in wide[key] else []
            if extra:
                raise InvalidRequest(f"{where}: tokens: a grant's {key} names {', '.join(extra)}, which the "
                                     f"service-wide {key} does not open (a grant only narrows)")
    return AccessSettings(types.MappingProxyType(tokens), frozenset(drivers), max_trials, metrics_open,
                          frozenset(namespaces), frozenset(h.lower().strip("[]") for h in hosts),
                          http_limits_from_mapping(raw.get("http") or {}, f"{where}: http"),
                          team_limits_from_mapping(raw.get("team_limits") or {}, f"{where}: team_limits"),
                          wide["node_pools"], wide["datacenters"], types.MappingProxyType(narrowing),
                          metrics_open_teams=open_teams, users=types.MappingProxyType(users))


def _names(raw: Any, where: str, star: bool = False) -> list[str]:
    """A non-empty list of Nomad names (``*`` too, when ``star``)."""
    if not isinstance(raw, list) or not raw or not all(
            isinstance(n, str) and (_TEAM.fullmatch(n) or (star and n == "*")) for n in raw):
        raise InvalidRequest(f"{where}: must be a non-empty list of Nomad names")
    return list(raw)


def scheduling_from_mapping(raw: Mapping[str, Any], where: str = "config") -> SchedulingSettings:
    known = {"policy", "hol_threshold_s", "tick_s", "half_life_s", "teams", "default_team", "sharing",
             "actuator_workers", "model_weights", "api", "refusal_avoid_s", "admission_deadline_s",
             "retention_s", "usage", "min_cycle_interval_s", "classes", "mig_relayout", "service_name",
             "runtime_defaults", "nomad", "ha", "preemption"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise InvalidRequest(f"{where}: unknown key(s) {', '.join(unknown)}")
    policy = str(raw.get("policy", DEFAULT_POLICY))
    if policy not in POLICIES:
        raise InvalidRequest(f"{where}: policy: unknown {policy!r}; known: {', '.join(sorted(POLICIES))}")
    try:
        teams = teams_from_mapping(raw.get("teams"), where)
        default = team_from_mapping(raw.get("default_team"), f"{where}: default_team")
        rules = tuple(ShareRule(node=str(r.get("node", "")), model=str(r.get("model", "")),
                                gpu_id=str(r.get("gpu_id", "")), slots=r.get("slots"))
                      for r in raw.get("sharing") or [])
        base = SchedulingSettings()  # a key the file leaves out keeps the one default, never a second copy
        usage = usage_from_mapping(raw.get("usage") or {}, f"{where}: usage")
        idle = idle_from_classes(raw.get("classes"))
        check_rounds(idle, usage.interval_s)
        return SchedulingSettings(
            policy=policy,
            hol_threshold_s=float(raw.get("hol_threshold_s", base.hol_threshold_s)),
            tick_s=float(raw.get("tick_s", base.tick_s)),
            min_cycle_interval_s=_at_most(float(raw.get("min_cycle_interval_s", base.min_cycle_interval_s)), 1.0,
                                          "min_cycle_interval_s"),
            fair=FairShareConfig(half_life_s=float(raw.get("half_life_s", base.fair.half_life_s)), teams=teams,
                                 default=default,
                                 model_weights={str(k): float(v) for k, v in (raw.get("model_weights") or {}).items()}),
            sharing=SharingConfig(rules),
            actuator_workers=int(raw.get("actuator_workers", base.actuator_workers)),
            refusal_avoid_s=float(raw.get("refusal_avoid_s", base.refusal_avoid_s)),
            admission_deadline_s=float(raw.get("admission_deadline_s", base.admission_deadline_s)),
            retention_s=float(raw.get("retention_s", base.retention_s)),
            service_name=_service_name(raw.get("service_name", base.service_name), where),
            usage=usage,
            classes=classes_from_mapping(raw.get("classes")),
            idle=idle,
            mig_relayout=mig_relayout_from_mapping(raw.get("mig_relayout"), f"{where}: mig_relayout"),
            runtime_defaults=runtime_defaults_from_mapping(raw.get("runtime_defaults"), f"{where}: runtime_defaults"),
            local_parse=_local_parse(raw.get("nomad"), f"{where}: nomad"),
            ha=ha_from_mapping(raw.get("ha"), f"{where}: ha"),
            take_back=take_back_from_config(raw, where),
            stop_on_client_after_s=stop_on_client_after(raw.get("nomad"), f"{where}: nomad"),
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidRequest(f"{where}: {exc}") from exc


def _local_parse(raw: Any, where: str) -> bool:
    """``nomad: {local_parse: true|false}`` (default true)."""
    if raw is None:
        return True
    if (not isinstance(raw, Mapping) or set(raw) - {"local_parse", "max_kill_timeout", "stop_on_client_after"}
            or not isinstance(raw.get("local_parse", True), bool)):
        raise InvalidRequest(f"{where}: must be a mapping with only local_parse: true or false, max_kill_timeout, "
                             "stop_on_client_after: a duration or null")
    return bool(raw.get("local_parse", True))


def _service_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _TEAM.fullmatch(value):
        raise InvalidRequest(f"{where}: service_name: must be a name (1-64 of A-Z, a-z, 0-9, '_', '.', '-')")
    return value


def _at_most(value: float, limit: float, key: str) -> float:
    if not 0 <= value <= limit:
        raise InvalidRequest(f"{key}: must be from 0 to {limit:g} seconds")
    return value
