"""`status ID` shows where a running entry is reached (pure formatting of the API's entry)."""

from __future__ import annotations

from typing import Any

from nomad_gpu.api.payloads import Entry
from nomad_gpu.cli.entryview import status_lines

SPEC: dict[str, Any] = {"name": "chat", "groups": [{"name": "main", "ports": {"http": {"to": 8000}, "metrics": {
    "static": 9100}}, "service": {"name": "chat", "port": "http"}}]}


def _addresses(entry: Entry) -> list[str]:
    return [value for label, value in status_lines(entry, None, None, {}) if label == "address"]


def test_each_port_has_its_address_and_the_service_on_it() -> None:
    entry = Entry(id="q1", name="chat", state="running", spec=SPEC,
                  addresses={"http": "10.0.0.2:23456", "metrics": "10.0.0.2:9100"})
    assert _addresses(entry) == ["http  10.0.0.2:23456 (service chat)", "metrics  10.0.0.2:9100"]


def test_before_it_runs_it_says_when_the_address_will_show() -> None:
    entry = Entry(id="q1", name="chat", state="queued", spec=SPEC)
    assert _addresses(entry) == ["- (shown once Nomad reports the job running)"]


def test_an_entry_without_ports_or_one_that_ended_has_no_address_line() -> None:
    assert _addresses(Entry(id="q1", name="x", state="running", spec={"groups": [{"name": "main"}]})) == []
    assert _addresses(Entry(id="q1", name="chat", state="complete", spec=SPEC)) == []


def test_an_older_service_without_the_field_reads_as_no_addresses() -> None:
    entry = Entry.from_json({"id": "q1", "name": "x", "state": "running"})
    assert entry.addresses == {}
