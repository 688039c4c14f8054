"""The project's one error tree. Edges translate it: the CLI into exit codes (`cli/errors.py`), the API
into HTTP statuses (`service/http/httpkit.py`), each with one table.

Dependency-free, so every layer may raise from it, the render layer included: a bad spec or template
(`SpecError`, `RenderError`) is an `InvalidRequest`, and so still a `ValueError` for callers that
catch that.
"""


class NomadGpuError(Exception):
    """Base of every error this project raises on purpose."""


class InvalidRequest(NomadGpuError, ValueError):
    """A request or spec that can never be valid (permanent: retrying will not help)."""


class TooLarge(InvalidRequest):
    """A request over a size limit (a body, a sweep's stored size)."""


class Unschedulable(InvalidRequest):
    """A request no node of the fleet could ever run (too many GPUs for one node, a model or MIG profile the
    fleet lacks): refused at submission unless the caller asked to queue it anyway."""


class NotAllowed(NomadGpuError):
    """A request this caller may not make (a driver, a namespace, another team's spec)."""


class OverLimit(NomadGpuError):
    """A caller over a configured limit of what it may hold at once (a team's live entries or stored bytes):
    the request is fine, and will be once some of what is held ends."""


class StateConflict(NomadGpuError):
    """A request the entry's current state does not allow (hold a running entry, HCL of a queued one)."""


class InvalidInventory(NomadGpuError, ValueError):
    """Node data that cannot be understood (bad MIG profile name, negative capacity...)."""


class LedgerConflict(NomadGpuError):
    """An attempt to commit capacity that is already committed: a bug caught, never ignored."""


class UnknownEntry(NomadGpuError, KeyError):
    """A queue entry, sweep or reservation that does not exist (or that the caller may not see)."""

    def __str__(self) -> str:  # KeyError quotes its message; this is a sentence
        return str(self.args[0]) if self.args else "no such entry"


class Unavailable(NomadGpuError):
    """Something this answer needs is not there now (no Nomad client, a dependency down): retry later."""


class UpstreamFailed(NomadGpuError):
    """Nomad (or another peer) could not answer what was asked of it."""


class UnreadableReply(NomadGpuError, ValueError):
    """A peer's reply that does not have the agreed shape (a version skew or a bug on its side)."""
