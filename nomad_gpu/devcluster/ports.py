"""Host ports: the dev cluster's model of Nomad's `NetworkIndex` for a group `network` block.

Read at v2.0.5 and kept as strict:
- `NetworkIndex.SetNode` + `AddAllocs` (nomad/structs/network.go): the ports in use on a node are its
  reserved host ports plus every port of every allocation on it that is not client-terminal;
- `AssignPorts` (same file): static (`ReservedPorts`) ports first, each refused with
  `reserved port collision <label>=<value>` when in use; then each dynamic port is drawn at random from
  the node's `MinDynamicPort`..`MaxDynamicPort` (default 20000-32000), never one in use, one of the
  ask's static ports, or one already picked for this offer (`getDynamicPortsStochastic`, 20 tries, then
  `getDynamicPortsPrecise`), else `dynamic port selection failed`;
- `BinPackIterator.Next` (scheduler/feasible/rank.go) exhausts a node whose offer failed with the
  dimension `network: <error>`; the offer is recorded as `AllocatedResources.Shared.Ports` (one
  `AllocatedPortMapping` per port: Label, Value, To, HostIP) and `Shared.Networks` (the ask with the
  dynamic values filled and the node's host address as `IP`, `AllocatedPortsToNetworkResouce`).
A dynamic port's `To` of 0 stays 0 (the host port itself); `-1` becomes the assigned value.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

MIN_DYNAMIC_PORT = 20000  # DefaultMinDynamicPort, nomad/structs/network.go v2.0.5
MAX_DYNAMIC_PORT = 32000  # DefaultMaxDynamicPort
MAX_RAND_PORT_ATTEMPTS = 20  # maxRandPortAttempts
MAX_VALID_PORT = 65536  # MaxValidPort
_RNG = random.Random()


@dataclass(frozen=True)
class PortAsk:
    label: str
    value: int  # the static port; 0 for a dynamic one
    to: int
    ignore_collision: bool = False


@dataclass(frozen=True)
class NetworkAsk:
    """The group's first `network` block (`iter.taskGroup.Networks[0]`, rank.go): what placement reads."""

    mode: str
    reserved: tuple[PortAsk, ...]
    dynamic: tuple[PortAsk, ...]


@dataclass(frozen=True)
class AllocatedPort:
    """`AllocatedPortMapping` (nomad/structs/structs.go v2.0.5)."""

    label: str
    value: int
    to: int
    host_ip: str
    ignore_collision: bool = False

    def to_json(self) -> JSON:
        return {"Label": self.label, "Value": self.value, "To": self.to, "HostIP": self.host_ip,
                "IgnoreCollision": self.ignore_collision}


def network_ask(group: JSON) -> NetworkAsk | None:
    """The typed ask of a canonical task group, or None when it has no ports."""
    networks = group.get("Networks") or []
    if not networks:
        return None
    first = networks[0] or {}

    def asks(raw: Any) -> tuple[PortAsk, ...]:
        return tuple(PortAsk(str(p.get("Label") or ""), int(p.get("Value") or 0), int(p.get("To") or 0),
                             bool(p.get("IgnoreCollision"))) for p in raw or [])

    ask = NetworkAsk(str(first.get("Mode") or ""), asks(first.get("ReservedPorts")), asks(first.get("DynamicPorts")))
    return ask if ask.reserved or ask.dynamic else None


def used_ports(allocs: Iterable[Any]) -> frozenset[int]:
    """Ports held on a node by its live allocations (`NetworkIndex.AddAllocs`); a port whose collision
    is ignored (`ignore_collision`, SO_REUSEPORT) is still listed, and only its own kind may share it."""
    return frozenset(port.value for alloc in allocs for port in getattr(alloc, "ports", ()))


def assign(ask: NetworkAsk, used: frozenset[int], host_ip: str, *, rng: random.Random = _RNG,
           low: int = MIN_DYNAMIC_PORT, high: int = MAX_DYNAMIC_PORT) -> tuple[AllocatedPort, ...] | str:
    """The offer for `ask` on a node whose ports `used` are taken, or Nomad's error text."""
    offer: list[AllocatedPort] = []
    for port in ask.reserved:
        if port.value < 0 or port.value >= MAX_VALID_PORT:
            return f"invalid port {port.value} (out of range)"
        if not port.ignore_collision and port.value in used:
            return f"reserved port collision {port.label}={port.value}"
        offer.append(AllocatedPort(port.label, port.value, port.to, host_ip, port.ignore_collision))
    static = {port.value for port in ask.reserved}
    for port in ask.dynamic:
        taken = used | static | {chosen.value for chosen in offer}
        value = _pick(taken, low, high, rng)
        if value is None:
            return "dynamic port selection failed"
        offer.append(AllocatedPort(port.label, value, value if port.to == -1 else port.to, host_ip))
    return tuple(offer)


def _pick(taken: set[int] | frozenset[int], low: int, high: int, rng: random.Random) -> int | None:
    for _ in range(MAX_RAND_PORT_ATTEMPTS):  # getDynamicPortsStochastic: min + rand.Intn(max - min)
        candidate = low + rng.randrange(max(1, high - low))
        if candidate not in taken:
            return candidate
    free = [p for p in range(low, high + 1) if p not in taken]  # getDynamicPortsPrecise, both ends included
    return rng.choice(free) if free else None


def shared_json(ports: tuple[AllocatedPort, ...], ask: NetworkAsk | None, host_ip: str) -> tuple[Any, Any]:
    """`AllocatedResources.Shared.Networks` and `.Ports` of an allocation (null without a network ask)."""
    if ask is None:
        return None, None
    by_label = {port.label: port for port in ports}

    def listed(asks: tuple[PortAsk, ...]) -> list[JSON] | None:
        out = []
        for p in asks:
            got = by_label.get(p.label)
            out.append({"Label": p.label, "Value": got.value if got else p.value, "To": got.to if got else p.to,
                        "HostNetwork": "default", "IgnoreCollision": p.ignore_collision})
        return out or None

    network = {"Mode": ask.mode, "Device": "", "CIDR": "", "IP": host_ip, "MBits": 0, "DNS": None,
               "ReservedPorts": listed(ask.reserved), "DynamicPorts": listed(ask.dynamic), "CNI": None}
    return [network], [port.to_json() for port in ports]


def validate(group: JSON, prefix: str) -> list[str]:
    """`TaskGroup.validateNetworks` (nomad/structs/structs.go v2.0.5), the rules a port can break."""
    errors: list[str] = []
    networks = group.get("Networks") or []
    labels: set[str] = set()
    static: dict[int, str] = {}
    for network in networks:
        for port in [*(network.get("ReservedPorts") or []), *(network.get("DynamicPorts") or [])]:
            label, value, to = str(port.get("Label") or ""), int(port.get("Value") or 0), int(port.get("To") or 0)
            if label in labels:
                errors.append(f"{prefix}: Port label {label} already in use by taskgroup network")
            labels.add(label)
            if value:
                if value in static and not port.get("IgnoreCollision"):
                    errors.append(f"{prefix}: Static port {value} already reserved by {static[value]}")
                elif value > 65535:
                    errors.append(f"{prefix}: Port {label} ({value}) cannot be greater than 65535")
                else:
                    static[value] = f"taskgroup network:{label}"
            if to < -1:
                errors.append(f'{prefix}: Port "{label}" cannot be mapped to negative value {to}')
            elif to > 65535:
                errors.append(f'{prefix}: Port "{label}" cannot be mapped to a port ({to}) greater than 65535')
    return errors
