"""Helpers for the dev cluster tests: bounded polling, a real line-by-line stream reader, jobspecs."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar

import nomad
import requests
import urllib3

T = TypeVar("T")


def wait_until(predicate: Callable[[], T | Literal[False] | None], timeout: float = 5.0, what: str = "condition") -> T:
    """Poll `predicate` until it returns something truthy (so never None or False); fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.002)


class StreamReader:
    """Reads `/v1/event/stream` with requests on a thread, one line at a time, as a real client does.

    `lines` keeps (arrival time, raw line); `frames` the decoded non-heartbeat frames.
    """

    def __init__(self, url: str, params: Iterable[tuple[str, str]] = (), headers: dict[str, str] | None = None) -> None:
        self.response = requests.get(f"{url}/v1/event/stream", params=list(params), headers=headers or {},
                                     stream=True, timeout=30)
        self.status = self.response.status_code
        self.headers = self.response.headers
        self.lines: list[tuple[float, bytes]] = []
        self.trailer = b""
        self.ended = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        # `iter_lines` waits for the end of a close-delimited body (Nomad 1.11.2+), so take what the socket has
        buf = b""
        try:
            while data := self.response.raw.read1(65536, decode_content=True):
                *lines, buf = (buf + data).split(b"\n")
                self.lines.extend((time.time(), line) for line in lines)
            self.trailer = buf  # up to 1.11.1, an error after the 200 ends the body without a newline
        except (requests.RequestException, urllib3.exceptions.HTTPError, AttributeError, ValueError,
                OSError) as exc:
            # An abrupt close, or `close()` from another thread, also ends the stream.
            self.error = exc
        finally:
            self.ended.set()

    @property
    def heartbeats(self) -> int:
        return sum(1 for _, line in self.lines if line == b"{}")

    @property
    def frames(self) -> list[dict[str, Any]]:
        return [json.loads(line) for _, line in list(self.lines) if line and line != b"{}"]

    @property
    def events(self) -> list[dict[str, Any]]:
        return [event for frame in self.frames for event in frame["Events"]]

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 5.0,
                 what: str = "event") -> dict[str, Any]:
        return wait_until(lambda: next((e for e in self.events if predicate(e)), None), timeout, what)

    def close(self) -> None:
        """Hang up. `Response.close()` would block until the next line arrives, so shut the socket
        down instead: the reader thread sees EOF at once."""
        # urllib3 drops its reference once headers are read; the socket lives on in the file object.
        sock = getattr(getattr(getattr(getattr(self.response.raw, "_fp", None), "fp", None), "raw", None),
                       "_sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.ended.wait(5)
        self.response.close()


def alloc_events(reader: StreamReader, job_id: str) -> list[tuple[str, str]]:
    """(Type, ClientStatus) of the Allocation events of one job, in stream order."""
    return [(e["Type"], e["Payload"]["Allocation"]["ClientStatus"]) for e in reader.events
            if e["Topic"] == "Allocation" and e["Payload"]["Allocation"]["JobID"] == job_id]


def jobspec(job_id: str, *, gpus: int = 0, device: str = "nvidia/gpu", count: int = 1, cpu: int = 500,
            memory: int = 1024, duration: float | None = None, fail: bool = False, node: str | None = None,
            pin: Iterable[str] | None = None, pin_operator: str = "set_contains_any",
            device_constraints: Iterable[tuple[str, str, str]] = (), env: dict[str, str] | None = None,
            meta: dict[str, str] | None = None, job_type: str = "batch", datacenters: Iterable[str] = ("dc1",),
            reschedule_attempts: int | None = 0, restart: tuple[int, str] | None = None) -> str:
    """An HCL jobspec shaped like the ones the service renders (node + device pin constraints)."""
    meta = dict(meta or {})
    if duration is not None:
        meta["nomad_gpu_dev_duration_s"] = str(duration)
    if fail:
        meta["nomad_gpu_dev_exit"] = "fail"
    lines = [f'job "{job_id}" {{', f'  type = "{job_type}"',
             "  datacenters = [" + ", ".join(f'"{dc}"' for dc in datacenters) + "]"]
    if meta:
        lines += ["  meta {"] + [f'    {k} = "{v}"' for k, v in meta.items()] + ["  }"]
    if node is not None:
        lines += ["  constraint {", '    attribute = "${node.unique.id}"', f'    value = "{node}"', "  }"]
    lines += ['  group "main" {', f"    count = {count}"]
    if reschedule_attempts is not None:
        lines += ["    reschedule {", f"      attempts = {reschedule_attempts}", "      unlimited = false", "    }"]
    if restart is not None:  # (attempts, mode), as the service's templates write it
        lines += ["    restart {", f"      attempts = {restart[0]}", '      delay = "1s"', '      interval = "1h"',
                  f'      mode = "{restart[1]}"', "    }"]
    lines += ['    task "work" {', '      driver = "docker"', '      config {', '        image = "busybox:1"',
              '        args = ["sleep", "${NOMAD_META_x}"]', "      }"]
    if env:
        lines += ["      env {"] + [f'        {k} = "{v}"' for k, v in env.items()] + ["      }"]
    lines += ["      resources {", f"        cpu = {cpu}", f"        memory = {memory}"]
    if gpus:
        lines += [f'        device "{device}" {{', f"          count = {gpus}"]
        constraints = list(device_constraints)
        if pin is not None:
            constraints.append(("${device.ids}", pin_operator, ",".join(pin)))
        for attribute, operator, value in constraints:
            lines += ["          constraint {", f'            attribute = "{attribute}"',
                      f'            operator = "{operator}"', f'            value = "{value}"', "          }"]
        lines += ["        }"]
    lines += ["      }", "    }", "  }", "}"]
    return "\n".join(lines) + "\n"


def submit(client: nomad.Nomad, hcl: str) -> dict[str, Any]:
    """Parse with the cluster, then register with the HCL as Submission (what the service does)."""
    job = client.jobs.parse(hcl, canonicalize=True)
    return dict(client.jobs.register_job({"Job": job, "Submission": {"Source": hcl, "Format": "hcl2",
                                                                      "VariableFlags": {}, "Variables": ""}}))


def job_allocs(dc_audit: dict[str, Any], job_id: str) -> list[dict[str, Any]]:
    return [a for a in dc_audit["allocations"] if a["job_id"] == job_id]
