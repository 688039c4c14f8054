"""The topology as the project's device plugin publishes it: one string attribute of a device group.

Nomad carries no topology of its own. A device group has attributes shared by all its instances
(`DeviceGroup.Attributes map[string]*structs.Attribute`, `plugins/device/device.go`), and an instance
has only an ID, health and `HwLocality.PciBusID` (`Device`, `DeviceLocality`, same file), which the
client copies unchanged into `NodeDeviceResource.Attributes` and `NodeDevice.Locality.PciBusID`
(`convertDeviceGroup`, `client/devicemanager/utils.go`; `nomad/structs/structs.go`; all v2.0.5). So the
plugin publishes, in each whole-GPU group, one string attribute `topology` keyed by PCI bus ID, and the
decoder joins it to the instances by their `Locality.PciBusID`:

    1;0:07:00.0/0/0/1*4 0:17:00.0/0/0/0*4 0:27:00.0/1/1/S 0:37:00.0/1/1/S

`1` is the format version; then one entry per GPU of the group, sorted by bus ID:
`<bus>/<numa node>/<PCIe switch>/<links>`. A figure the plugin could not read is `-`. `<links>` is `-`
(no NVLink), or comma-separated tokens: `S` (on the NVSwitch fabric: NVLink to every other `S` GPU)
and `<k>*<n>` (n direct NVLinks to the k-th entry of this list). Eight GPUs take 129 to 145 characters.

A Nomad attribute holds one value per group, so the string is rewritten whole on every fingerprint;
Nomad sends the node again when it changes (`NodeDeviceResource.Equal` compares attributes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nomad_gpu.domain.errors import InvalidInventory
from nomad_gpu.domain.ids import InstanceId
from nomad_gpu.domain.topology import GpuPlace, Topology

ATTRIBUTE = "topology"
"""The device group attribute that carries it."""
VERSION = "1"
MAX_LENGTH = 8192
"""Far above a 64-GPU node's string; anything longer is not ours."""


@dataclass(frozen=True)
class WirePlace:
    """One GPU as published, keyed by its PCI bus ID."""

    bus: str
    numa: int | None = None
    switch: int | None = None
    nvswitch: bool = False
    peers: tuple[tuple[str, int], ...] = ()
    """(peer bus ID, number of direct NVLinks)."""


def bus_key(bus_id: str) -> str:
    """A PCI bus ID in one spelling: NVML prints an 8- or 4-digit domain in either case
    (`00000000:07:00.0`, `0000:07:00.0`); both become `0:07:00.0`."""
    text = bus_id.strip().lower()
    head, sep, function = text.rpartition(".")
    parts = head.split(":") if sep else []
    if len(parts) == 2:
        parts.insert(0, "0")
    if len(parts) != 3 or not function:
        raise InvalidInventory(f"PCI bus ID {bus_id!r} is not [domain:]bus:device.function")
    try:
        domain = int(parts[0], 16)
        for part in (parts[1], parts[2], function):
            int(part, 16)
    except ValueError:
        raise InvalidInventory(f"PCI bus ID {bus_id!r} is not hexadecimal") from None
    return f"{domain:x}:{parts[1]}:{parts[2]}.{function}"


def encode(places: Sequence[WirePlace]) -> str:
    """The attribute's value for these GPUs (peers outside the list are left out: they are not in
    this group, and a set is always taken from one group)."""
    ordered = sorted(places, key=lambda p: bus_key(p.bus))
    position = {bus_key(p.bus): k for k, p in enumerate(ordered)}
    entries = []
    for p in ordered:
        tokens = ["S"] if p.nvswitch else []
        for peer, links in sorted(p.peers):
            k = position.get(bus_key(peer))
            if k is not None and links > 0:
                tokens.append(f"{k}*{links}")
        entries.append(f"{bus_key(p.bus)}/{_figure(p.numa)}/{_figure(p.switch)}/{','.join(tokens) or '-'}")
    return f"{VERSION};{' '.join(entries)}"


def decode(value: str) -> list[WirePlace]:
    """The entries of an attribute value; InvalidInventory names what is wrong."""
    if len(value) > MAX_LENGTH:
        raise InvalidInventory(f"topology attribute is {len(value)} characters long (at most {MAX_LENGTH})")
    version, sep, body = value.partition(";")
    if not sep or version != VERSION:
        raise InvalidInventory(f"topology attribute has format {version!r}, this release reads {VERSION!r}")
    rows = [entry.split("/") for entry in body.split()]
    buses = []
    for row in rows:
        if len(row) != 4:
            raise InvalidInventory(f"topology entry {'/'.join(row)!r} is not <bus>/<numa>/<switch>/<links>")
        buses.append(bus_key(row[0]))
    if len(set(buses)) != len(buses):
        raise InvalidInventory("topology attribute lists a PCI bus ID twice")
    out = []
    for k, (bus, row) in enumerate(zip(buses, rows, strict=True)):
        nvswitch, peers = False, []
        for token in ([] if row[3] == "-" else row[3].split(",")):
            if token == "S":
                nvswitch = True
                continue
            index, star, links = token.partition("*")
            if not star or not index.isdigit() or not links.isdigit() or int(index) >= len(buses) or int(index) == k:
                raise InvalidInventory(f"topology entry for {bus}: link {token!r} is not <entry>*<links>")
            peers.append((buses[int(index)], int(links)))
        out.append(WirePlace(bus, _read_figure(row[1], bus), _read_figure(row[2], bus), nvswitch, tuple(peers)))
    return out


def to_topology(places: Sequence[WirePlace], bus_of: Mapping[InstanceId, str]) -> Topology:
    """Join published places to instances by PCI bus ID; instances without an entry stay unknown,
    and entries for no instance (a GPU given to another group) are dropped."""
    instance_of = {bus_key(bus): gpu for gpu, bus in bus_of.items()}
    found: dict[InstanceId, GpuPlace] = {}
    for p in places:
        gpu = instance_of.get(p.bus)
        if gpu is None:
            continue
        peers = tuple(sorted((instance_of[b], n) for b, n in p.peers if b in instance_of))
        found[gpu] = GpuPlace(p.numa, p.switch, p.nvswitch, peers)
    return Topology.of(found)


def _figure(value: int | None) -> str:
    return "-" if value is None else str(value)


def _read_figure(text: str, bus: str) -> int | None:
    if text == "-":
        return None
    if not text.isdigit():
        raise InvalidInventory(f"topology entry for {bus}: {text!r} is not a number or '-'")
    return int(text)
