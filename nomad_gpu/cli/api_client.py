"""A small client of the service's HTTP API, for the CLI (NOMAD_GPU_ADDR, NOMAD_GPU_TOKEN).

Answers come back as the typed payloads the service built them from (`nomad_gpu.api.payloads`), so no
command reads a field by a string key; an answer that does not have the agreed shape is an
UnreadableReply (exit code 1), never a KeyError.
"""

from __future__ import annotations

from typing import Any

import requests

from nomad_gpu.api.payloads import (
    Allocations,
    Entries,
    Entry,
    ErrorReply,
    Hcl,
    Inventory,
    NodeView,
    Patch,
    Status,
    Sweep,
)
from nomad_gpu.domain.errors import NomadGpuError


class ServiceError(NomadGpuError):
    """The service answered with an error (the message is its `error` field)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ServiceUnreachable(NomadGpuError):
    pass


class ApiClient:
    def __init__(self, address: str, token: str | None = None, timeout_s: float = 30.0,
                 cacert: str | None = None) -> None:
        self.address = address.rstrip("/")
        self.session = requests.Session()
        # a private CA (NOMAD_GPU_CACERT), else the system's trust store, never none. Passed with each request:
        # requests lets REQUESTS_CA_BUNDLE in the environment override a session's own `verify`
        self.verify: str | bool = cacert or True
        # a POST without a body (hold, requeue) must carry it: a web page cannot (service/http/browser.py)
        self.session.headers["X-Nomad-Gpu-Client"] = "cli"
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self.timeout_s = timeout_s

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            resp = self.session.request(method, f"{self.address}{path}", timeout=self.timeout_s,
                                        verify=self.verify, **kwargs)
        except requests.RequestException as exc:
            raise ServiceUnreachable(self._unreachable(exc, "is `nomad-gpu serve` or `nomad-gpu dev` running? "
                                                       "(NOMAD_GPU_ADDR)")) from exc
        try:
            body = resp.json()
        except ValueError:
            body = {"error": resp.text.strip()}
        if resp.status_code >= 400:
            raise ServiceError(_refusal(body), resp.status_code)
        return body

    def _unreachable(self, exc: requests.RequestException, hint: str = "") -> str:
        """One line: where, and what to do. An untrusted certificate is named as such, since the fix
        (NOMAD_GPU_CACERT) is not what a connection failure suggests."""
        if isinstance(exc, requests.exceptions.SSLError) and "certificate verify failed" in str(exc).lower():
            return (f"cannot reach nomad-gpu at {self.address}: certificate not trusted: set NOMAD_GPU_CACERT "
                    "to the CA file that signed the service's certificate")
        return f"cannot reach nomad-gpu at {self.address} ({type(exc).__name__})" + (f"; {hint}" if hint else "")

    def submit(self, spec_text: str, idempotency_key: str | None = None) -> list[Entry]:
        headers = {"Content-Type": "application/yaml"}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        return list(Entries.from_json(self.call("POST", "/v1/jobs", data=spec_text.encode(), headers=headers)).entries)

    def jobs(self, state: str | None = None, sweep: str | None = None, eta: bool = False, *,
             team: str | None = None, name_glob: str | None = None) -> list[Entry]:
        params = {k: v for k, v in (("state", state), ("sweep", sweep), ("eta", "true" if eta else ""),
                                    ("team", team), ("name", name_glob)) if v}
        return list(Entries.from_json(self.call("GET", "/v1/jobs", params=params)).entries)

    def job(self, entry_id: str) -> Entry:
        return Entry.from_json(self.call("GET", f"/v1/jobs/{entry_id}"))

    def cancel(self, entry_id: str) -> Entry:
        return Entry.from_json(self.call("DELETE", f"/v1/jobs/{entry_id}"))

    def act(self, entry_id: str, action: str) -> Entry:
        """`hold`, `release` or `requeue` one entry."""
        return Entry.from_json(self.call("POST", f"/v1/jobs/{entry_id}/{action}"))

    def update(self, entry_id: str, change: Patch) -> Entry:
        return Entry.from_json(self.call("PATCH", f"/v1/jobs/{entry_id}", json=change.to_json()))

    def allocations(self, entry_id: str) -> Allocations:
        return Allocations.from_json(self.call("GET", f"/v1/jobs/{entry_id}/allocations"))

    def hcl(self, entry_id: str) -> Hcl:
        return Hcl.from_json(self.call("GET", f"/v1/jobs/{entry_id}/hcl"))

    def logs(self, entry_id: str, log_type: str, offset: int = 0, **where: Any) -> tuple[bytes, int, bool]:
        """Log bytes from ``offset``, the offset after them, and whether the allocation has ended."""
        params = {"type": log_type, "offset": str(offset), **{k: str(v) for k, v in where.items() if v is not None}}
        try:
            resp = self.session.get(f"{self.address}/v1/jobs/{entry_id}/logs", params=params, timeout=self.timeout_s,
                                    verify=self.verify)
        except requests.RequestException as exc:
            raise ServiceUnreachable(self._unreachable(exc)) from exc
        if resp.status_code >= 400:
            try:
                message = _refusal(resp.json())
            except ValueError:
                message = resp.text.strip()
            raise ServiceError(message, resp.status_code)
        next_offset = int(resp.headers.get("X-Log-Offset") or offset + len(resp.content))
        return resp.content, next_offset, resp.headers.get("X-Log-Ended") == "true"

    def cancel_sweep(self, sweep_id: str) -> Sweep:
        return Sweep.from_json(self.call("DELETE", f"/v1/sweeps/{sweep_id}"))

    def sweep(self, sweep_id: str) -> Sweep:
        return Sweep.from_json(self.call("GET", f"/v1/sweeps/{sweep_id}"))

    def inventory(self) -> list[NodeView]:
        return list(Inventory.from_json(self.call("GET", "/v1/inventory")).nodes)

    def status(self) -> Status:
        return Status.from_json(self.call("GET", "/v1/status"))


def _refusal(body: Any) -> str:
    """The one line of a refusal (`{"error": ...}`), or the body itself when it is something else."""
    try:
        return ErrorReply.from_json(body).error
    except NomadGpuError:
        return str(body)
