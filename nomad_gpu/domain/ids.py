"""Identifier types, so a node id can never be passed where an instance id is expected."""

from typing import NewType

NodeId = NewType("NodeId", str)
"""A Nomad node ID."""

InstanceId = NewType("InstanceId", str)
"""A device instance: `GPU-<uuid>` (whole or shared GPU) or `MIG-<uuid>` (a MIG slice)."""

EntryId = NewType("EntryId", str)
"""A queue entry: one submitted job. Nomad job IDs are derived from it."""

Team = NewType("Team", str)
"""The account that fair share and quotas are counted against."""

MILLI_PER_GPU = 1000
"""Time-slice shares are counted in milli-GPU; the shares on one GPU never sum past this."""
