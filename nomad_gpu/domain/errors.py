"""The core's error tree. Edges translate these into exit codes and HTTP statuses."""


class NomadGpuError(Exception):
    """Base of every error this project raises on purpose."""


class InvalidRequest(NomadGpuError, ValueError):
    """A request or spec that can never be valid (permanent: retrying will not help)."""


class InvalidInventory(NomadGpuError, ValueError):
    """Node data that cannot be understood (bad MIG profile name, negative capacity...)."""


class LedgerConflict(NomadGpuError):
    """An attempt to commit capacity that is already committed: a bug caught, never ignored."""


class UnknownEntry(NomadGpuError, KeyError):
    """A queue entry or reservation that does not exist."""
