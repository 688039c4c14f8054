"""After a resync the stream resumes from the lower of the lists' indexes (each list's `X-Nomad-Index`
is its own table's: nomad/alloc_endpoint.go `List`, v2.0.5), so it replays the other table's older
events; those are older than that table's list and must not be handled (a stale `running`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import requests

from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.nomad.decode import NO_SHARING, AllocInfo
from nomad_gpu.nomad.watcher import Watcher


class Handler:
    def __init__(self) -> None:
        self.allocs: list[AllocInfo] = []

    def on_resync(self, nodes: list[Any], allocs: list[AllocInfo]) -> None: ...
    def on_node(self, node: Any) -> None: ...
    def on_node_removed(self, node_id: str) -> None: ...

    def on_alloc(self, alloc: AllocInfo) -> None:
        self.allocs.append(alloc)

    def on_job_deregistered(self, job_id: str) -> None: ...
    def on_eval(self, evaluation: Any) -> None: ...


def _frame(index: int, status: str) -> dict[str, Any]:
    alloc = {"ID": "a1", "JobID": "j", "TaskGroup": "main", "NodeID": "n1", "ClientStatus": status,
             "ModifyIndex": index}
    return {"Index": index, "Events": [{"Topic": "Allocation", "Type": "AllocationUpdated", "Key": "a1",
                                        "Index": index, "Payload": {"Allocation": alloc}}]}


class Client:
    settings = NomadSettings()

    def snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, dict[str, int]]:
        done = {"ID": "a1", "JobID": "j", "TaskGroup": "main", "NodeID": "n1", "ClientStatus": "complete",
                "ModifyIndex": 100}
        return [], [done], 5, {"Node": 5, "Allocation": 100}

    def event_stream(self, index: int, topics: Sequence[str], read_timeout_s: float = 60.0,
                     opened: Callable[[requests.Response], None] | None = None) -> Iterator[dict[str, Any]]:
        assert index == 6, "resumed from the lower table index"
        yield from (_frame(50, "running"), _frame(101, "lost"))


def test_replayed_events_older_than_their_tables_list_are_skipped() -> None:
    handler = Handler()
    watcher = Watcher(Client(), handler, NO_SHARING)  # type: ignore[arg-type]
    watcher.resync()
    assert watcher._follow() is True
    assert [a.client_status.value for a in handler.allocs] == ["lost"]
