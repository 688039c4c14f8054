"""Critical XID events from NVML: how a GPU says it broke (ECC, fell off the bus, ...), read without blocking.

NVML delivers XIDs only to an event set that registered for them before they happened, so a monitor lives
as long as the NVML session that owns it; a one-shot read sees only what happened during the read. The
monitor never blocks (wait timeout 0) and never raises on a GPU that does not support events.
"""

from __future__ import annotations

import logging
from typing import Any

from nomad_gpu.nvml import codes
from nomad_gpu.nvml.model import XidError

logger = logging.getLogger(__name__)

MAX_DRAIN = 256
"""Events taken per drain: a GPU in an XID storm must not hold the caller in the loop."""


class XidMonitor:
    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._set: Any | None = None
        self._watched: set[str] = set()
        self._failed = False

    def watch(self, uuid: str, handle: Any) -> None:
        """Register a GPU for critical XID events (once; unsupported GPUs are skipped quietly)."""
        if uuid in self._watched or self._failed:
            return
        self._watched.add(uuid)
        try:
            if self._set is None:
                self._set = self._nvml.nvmlEventSetCreate()
            self._nvml.nvmlDeviceRegisterEvents(handle, codes.EVENT_TYPE_XID_CRITICAL, self._set)
        except Exception as exc:
            code = getattr(exc, "value", None)
            if not isinstance(code, int):
                raise
            if code not in codes.ABSENT:
                logger.warning("cannot watch XID events on %s: %s", uuid, exc)
            if self._set is None:
                self._failed = True

    def drain(self) -> list[XidError]:
        """Every event waiting now, oldest first."""
        if self._set is None:
            return []
        out: list[XidError] = []
        for _ in range(MAX_DRAIN):
            try:
                data = self._nvml.nvmlEventSetWait(self._set, 0)
            except Exception as exc:
                code = getattr(exc, "value", None)
                if not isinstance(code, int):
                    raise
                if code != codes.TIMEOUT:
                    logger.warning("reading XID events failed: %s", exc)
                break
            if int(data.eventType) != codes.EVENT_TYPE_XID_CRITICAL:
                continue
            try:
                uuid = str(self._nvml.nvmlDeviceGetUUID(data.device))
            except Exception as exc:
                if not isinstance(getattr(exc, "value", None), int):
                    raise
                uuid = "unknown"
            gi = getattr(data, "gpuInstanceId", None)
            gi_id = int(gi) if gi is not None and int(gi) != codes.INVALID_INSTANCE_ID else None
            out.append(XidError(uuid, int(data.eventData), gi_id))
        return out

    def close(self) -> None:
        if self._set is None:
            return
        try:
            self._nvml.nvmlEventSetFree(self._set)
        except Exception as exc:
            if not isinstance(getattr(exc, "value", None), int):
                raise
        self._set = None
