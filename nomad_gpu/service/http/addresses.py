"""Where a running entry can be reached: its ports' `host:port`, as Nomad assigned them (DESIGN 19).

Nomad picks a dynamic port when it places the allocation and records it in
`AllocatedResources.Shared.Ports`; a native service registration publishes exactly that mapping's
HostIP and host port (`GetAddress` in address mode auto/host, client/serviceregistration/address.go
v2.0.5). So the address is read from the allocations the watcher already follows, and shown from the
moment Nomad reports an allocation running, when the registration appears, until it stops.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from nomad_gpu.domain.ids import EntryId
from nomad_gpu.nomad.decode import AllocInfo, AllocStatus

if TYPE_CHECKING:
    from nomad_gpu.service.loops.scheduler import SchedulerService

__all__ = ["addresses", "entry_addresses"]


def addresses(allocs: Iterable[AllocInfo]) -> dict[str, str]:
    """Port name -> `host:port` of the running allocations that Nomad still wants running.

    A name used by one allocation is the key as written in the spec (`http`); when several allocations
    have it (groups of a gang, `count > 1`), each is keyed `<group>.<name>`, and `<group>.<name>.<alloc>`
    (the allocation ID's first 8 characters) when one group has several."""
    running = sorted((a for a in allocs if a.client_status is AllocStatus.RUNNING and a.desired_status == "run"),
                     key=lambda a: (a.task_group, a.create_time_ns, a.id))
    by_label = Counter(p.label for a in running for p in a.ports)
    by_group = Counter((a.task_group, p.label) for a in running for p in a.ports)
    out: dict[str, str] = {}
    for alloc in running:
        for port in alloc.ports:
            key = port.label
            if by_label[port.label] > 1:
                key = f"{alloc.task_group}.{port.label}"
                if by_group[(alloc.task_group, port.label)] > 1:
                    key = f"{key}.{alloc.id[:8]}"
            out[key] = port.address
    return out


def entry_addresses(service: SchedulerService, entry_id: str) -> dict[str, str]:
    """The addresses of one entry (empty unless it is running and has ports)."""
    with service._lock:
        tracked = service.life.entries.get(EntryId(entry_id))
        allocs = list(tracked.allocs.values()) if tracked is not None else []
    return addresses(allocs)
