"""The Nomad version the dev cluster plays, and the behaviours that change with it.

Nomad's HTTP API changed under clients more than once between 1.9 and 2.0; a stand-in that plays
only one version lets every test pass against a cluster nobody runs. The behaviours that differ are
named here, each with the source file and tag it was read from, so that a test can run against
every version it matters for (`DevCluster(nomad_version=...)`, `--nomad-version`).

The versions read are 1.9.7, 1.10.5, 1.11.1, 1.11.2, 2.0.2, 2.0.3 and 2.0.5: anything from 1.9.0 to 2.0.x is
accepted, and anything else is refused rather than guessed at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_NOMAD_VERSION = "2.0.5"
_OLDEST = (1, 9, 0)
_NEWEST_MINOR = (2, 0)
_PATTERN = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True, order=True)
class NomadVersion:
    major: int
    minor: int
    patch: int

    @staticmethod
    def parse(text: str) -> NomadVersion:
        """`2.0.5` or `v1.10.5`; ValueError (one line) for anything the dev cluster does not model."""
        match = _PATTERN.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"Nomad version {text!r} is not MAJOR.MINOR.PATCH (e.g. {DEFAULT_NOMAD_VERSION})")
        version = NomadVersion(*(int(part) for part in match.groups()))
        if version.as_tuple() < _OLDEST or (version.major, version.minor) > _NEWEST_MINOR:
            raise ValueError(f"Nomad version {version} is not modelled: the dev cluster plays 1.9.0 to 2.0.x")
        return version

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def at_least(self, major: int, minor: int, patch: int = 0) -> bool:
        return self.as_tuple() >= (major, minor, patch)

    @property
    def hijacks_event_stream(self) -> bool:
        """From 1.11.2 the event stream handler hijacks the connection and writes its own
        `HTTP/1.1 200 OK`, with no length and no chunking: the body ends at close
        (`command/agent/event_endpoint.go`, v1.11.2 and v2.0.5; chunked through net/http in v1.11.1)."""
        return self.at_least(1, 11, 2)

    @property
    def places_short_device_offers(self) -> bool:
        """Before 1.11.1 a pinned device ask could be placed with fewer instances than it asked for, or
        none, when a pinned instance was taken (`deviceAllocator.createOffer`, scheduler/device.go v1.9.7
        and v1.10.5, scheduler/feasible/device.go v1.11.0; fixed by c785f9d50c, #27177, in v1.11.1)."""
        return not self.at_least(1, 11, 1)

    @property
    def has_max_run_duration(self) -> bool:
        """From 2.0.3 a task group may carry `max_run_duration` (#27803: `TaskGroup.MaxRunDuration` in
        api/tasks.go and nomad/structs/structs.go v2.0.3, absent in v2.0.2); maxrun.py models it."""
        return self.at_least(2, 0, 3)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"
