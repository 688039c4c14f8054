"""The plugin's live view of the node: one NVML session, lasting faults (XIDs), the devices last advertised.

Fingerprint, Stats and Reserve run on different gRPC threads; they share this object and it takes one lock
around NVML. Every read drains XID events, so a read for Stats cannot hide a fault from Fingerprint: the
faults are kept here, by device UUID, for the life of the process (a GPU that raised a hardware XID stays
unhealthy until the agent, and with it the plugin, restarts after a reset; NVIDIA's Kubernetes plugin
does the same).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from nomad_gpu.nvml import Inventory, NvmlReader, NvmlUnavailable, Unavailable, XidError
from nomad_gpu.nvml.codes import APPLICATION_XIDS
from nomad_gpu.plugin.config import PluginConfig
from nomad_gpu.plugin.devices import Group, Instance, build_groups, carry_vanished, index_instances

logger = logging.getLogger(__name__)


class NodeState:
    def __init__(self, nvml: Any | None = None) -> None:
        self._reader = NvmlReader(nvml)
        self._lock = threading.Lock()
        self._config = PluginConfig()
        self._sticky: dict[str, str] = {}
        self._groups: list[Group] = []
        self._inventory: Inventory | NvmlUnavailable | None = None
        self._published: dict[str, Instance] | None = None

    @property
    def config(self) -> PluginConfig:
        return self._config

    def configure(self, config: PluginConfig) -> None:
        with self._lock:
            self._config = config

    def refresh(self) -> list[Group]:
        """Read NVML and rebuild the device groups (never raises for an NVML state)."""
        with self._lock:
            inventory = self._read(links=True)  # the topology goes out with every fingerprint
            groups = build_groups(inventory, self._config, self._sticky)
            reason = (f"NVML unavailable: {inventory.message}" if isinstance(inventory, NvmlUnavailable)
                      else "no longer reported by NVML")
            if self._config.enabled:
                groups = carry_vanished(self._groups, groups, reason)
            self._groups = groups
            return groups

    def publish(self, groups: list[Group]) -> None:
        """The groups just sent to Nomad: Reserve accepts exactly these IDs."""
        with self._lock:
            self._published = index_instances(groups)

    def published(self) -> dict[str, Instance]:
        with self._lock:
            if self._published is not None:
                return self._published
        # Reserve before the first fingerprint (not what Nomad does, but cheap to answer right).
        groups = self.refresh()
        self.publish(groups)
        return index_instances(groups)

    def snapshot(self) -> tuple[list[Group], Inventory | NvmlUnavailable]:
        """Fresh figures for Stats, with the groups as last built (faults still recorded)."""
        with self._lock:
            inventory = self._read()
            return list(self._groups), inventory

    def close(self) -> None:
        with self._lock:
            self._reader.close()

    def _read(self, *, links: bool = False) -> Inventory | NvmlUnavailable:
        try:
            inventory = self._reader.read(links=links)
        except Exception as exc:  # a bug or a broken binding must not end the stream: report, retry later
            logger.exception("reading NVML failed")
            self._reader.close()
            inventory = NvmlUnavailable(Unavailable.ERROR, f"reading NVML failed: {exc}")
        if isinstance(inventory, NvmlUnavailable):
            self._reader.close()  # start a fresh session next time (a driver may come back)
        else:
            self._record(inventory)
        self._inventory = inventory
        return inventory

    def _record(self, inventory: Inventory) -> None:
        for xid in inventory.xid_errors:
            target = _xid_target(inventory, xid)
            if xid.code in APPLICATION_XIDS or target is None:
                logger.info("XID %d on %s (application error, device stays healthy)", xid.code, xid.gpu_uuid)
                continue
            if target not in self._sticky:
                logger.warning("XID %d on %s: marking %s unhealthy", xid.code, xid.gpu_uuid, target)
                self._sticky[target] = f"XID {xid.code} reported by NVML"


def _xid_target(inventory: Inventory, xid: XidError) -> str | None:
    gpu = inventory.gpu(xid.gpu_uuid)
    if gpu is None:
        return None
    if xid.gpu_instance_id is not None and gpu.mig_enabled:
        for mig in gpu.migs:
            if mig.gpu_instance_id == xid.gpu_instance_id:
                return mig.uuid
    return gpu.uuid

