"""`ha:` in the service config: the leader's lease on PostgreSQL (service/ha/leadership.py, store/pglease.py).

    ha:
      lease: 10s          # how long a leader stays leader without renewing (renewed every lease/3)
      advertise: https://ctl-1.internal:PORT   # where the other replicas forward requests (default: --listen)

On SQLite (one process per file) the section is read and has nothing to do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nomad_gpu.domain.errors import InvalidRequest

DEFAULT_LEASE_S = 10.0
MIN_LEASE_S = 0.5
MAX_LEASE_S = 300.0
_DURATION = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>ms|s|m)?$")
_URL = re.compile(r"^https?://[^\s/?#]+/?$")


@dataclass(frozen=True)
class HaSettings:
    lease_s: float = DEFAULT_LEASE_S
    advertise: str = ""
    """The API address the other replicas forward to; empty: the address this replica listens on."""


def ha_from_mapping(raw: Any, where: str = "ha") -> HaSettings:
    if raw is None:
        return HaSettings()
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{where}: must be a mapping (lease, advertise)")
    unknown = sorted(set(map(str, raw)) - {"lease", "advertise"})
    if unknown:
        raise InvalidRequest(f"{where}: unknown key(s) {', '.join(unknown)}")
    lease = raw.get("lease", DEFAULT_LEASE_S)
    m = None if isinstance(lease, bool) else _DURATION.match(str(lease).strip())
    if m is None:
        raise InvalidRequest(f"{where}: lease: must be a duration such as 10s, 1500ms or 1m")
    seconds = float(m.group("n")) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group("unit")]
    if not MIN_LEASE_S <= seconds <= MAX_LEASE_S:
        raise InvalidRequest(f"{where}: lease: must be from {MIN_LEASE_S:g}s to {MAX_LEASE_S:g}s")
    advertise = raw.get("advertise", "")
    if not isinstance(advertise, str) or (advertise and not _URL.match(advertise)):
        raise InvalidRequest(f"{where}: advertise: must be the API's URL as other replicas reach it "
                             "(http://host:port or https://host:port)")
    return HaSettings(lease_s=seconds, advertise=advertise.rstrip("/"))
