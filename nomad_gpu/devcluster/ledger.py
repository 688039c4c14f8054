"""The dev cluster's own device accounting: which live allocation holds which device instance.

It is deliberately tiny and shares nothing with the project's scheduling core (DESIGN.md 3.8): the
dev cluster exists to judge that core, so a bug there must not be able to hide here. Two rules:

1. A device instance is held by at most one live allocation. `hold` refuses (raises) rather than
   overwrite, so a placement bug in the dev cluster itself fails loudly instead of double-booking.
2. Time-slice shares are *not* refused (Nomad cannot see them: they reach the task as an env var),
   but the milli-GPU of live shares on each shared GPU is summed, and every placement that pushes a
   GPU over 1000 is counted as an oversubscription for the audit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

FULL_GPU_MILLI = 1000


class DoubleBookingError(RuntimeError):
    """An attempt to hold an instance that a live allocation already holds (a dev cluster bug)."""


class DeviceLedger:
    """Instance holds and share sums. Not thread-safe: the cluster state's lock guards it."""

    def __init__(self) -> None:
        self._holder: dict[str, str] = {}          # device instance ID -> alloc ID
        self._held_by: dict[str, tuple[str, ...]] = {}  # alloc ID -> instance IDs
        self._shares: dict[str, dict[str, int]] = {}    # shared GPU ID -> {alloc ID: milli}
        self.double_bookings_refused = 0
        self._refusals: list[dict[str, Any]] = []
        self.share_oversubscriptions = 0

    # -- whole instances (GPU-..., MIG-...) --------------------------------------------------------

    def is_free(self, instance_id: str) -> bool:
        return instance_id not in self._holder

    def holder(self, instance_id: str) -> str | None:
        return self._holder.get(instance_id)

    def hold(self, alloc_id: str, instance_ids: Iterable[str]) -> None:
        """Record that `alloc_id` holds these instances; all or nothing."""
        ids = tuple(instance_ids)
        if alloc_id in self._held_by:
            raise DoubleBookingError(f"alloc {alloc_id} already holds devices")
        if len(set(ids)) != len(ids):
            raise DoubleBookingError(f"alloc {alloc_id} asked for the same instance twice: {ids}")
        taken = [i for i in ids if i in self._holder]
        if taken:
            raise DoubleBookingError(f"instances {taken} are held by {[self._holder[i] for i in taken]}")
        for instance_id in ids:
            self._holder[instance_id] = alloc_id
        self._held_by[alloc_id] = ids

    def release(self, alloc_id: str) -> tuple[str, ...]:
        """Free whatever `alloc_id` holds (instances and share); returns the freed instance IDs."""
        ids = self._held_by.pop(alloc_id, ())
        for instance_id in ids:
            del self._holder[instance_id]
        for holders in self._shares.values():
            holders.pop(alloc_id, None)
        return ids

    def count_refusal(self, detail: dict[str, Any]) -> None:
        """Count a placement refused because it could only be met with held instances."""
        self.double_bookings_refused += 1
        self._refusals.append(dict(detail))

    def refusals(self) -> list[dict[str, Any]]:
        return [dict(detail) for detail in self._refusals]

    # -- time-slice shares -------------------------------------------------------------------------

    def add_share(self, alloc_id: str, gpu_id: str, milli: int) -> bool:
        """Record a live share; returns True (and counts it) when the GPU's sum now exceeds 1000."""
        holders = self._shares.setdefault(gpu_id, {})
        holders[alloc_id] = milli
        if sum(holders.values()) > FULL_GPU_MILLI:
            self.share_oversubscriptions += 1
            return True
        return False

    def share_sum(self, gpu_id: str) -> int:
        return sum(self._shares.get(gpu_id, {}).values())

    def share_sums(self) -> dict[str, int]:
        """Shared GPU ID -> summed milli of its live shares (GPUs ever shared, including 0)."""
        return {gpu_id: sum(holders.values()) for gpu_id, holders in self._shares.items()}

    def held(self) -> dict[str, str]:
        """A copy of instance ID -> alloc ID, for checks and tests."""
        return dict(self._holder)
