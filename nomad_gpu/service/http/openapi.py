"""The API's description (OpenAPI 3.1), served at `/openapi.json` and written out as docs/api.md.

One table, `OPERATIONS`, describes every route the service answers, and the schemas of its answers are
generated from the payload types the service sends (`nomad_gpu.api.payloads`); the document and the
Markdown page are built from both, and a test checks that every route of the app is in it, so a
route cannot be added without being described. `python -m nomad_gpu.service.http.openapi` prints the
Markdown (`make api-docs` writes docs/api.md).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from nomad_gpu import __version__
from nomad_gpu.api import payloads
from nomad_gpu.api.codec import json_schema
from nomad_gpu.store import EntryState

JSON = dict[str, Any]


@dataclass(frozen=True)
class Param:
    name: str
    where: str  # path | query | header
    description: str
    type: str = "string"
    required: bool = False


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    summary: str
    responses: dict[int, str]
    """Status -> description; a 2xx is answered with `schema`, a 4xx/5xx with the Error schema."""
    schema: str | None = None
    """A component name, or `text`, `html` for a body that is not JSON."""
    params: tuple[Param, ...] = ()
    body: tuple[str, ...] = ()
    """Media types the request body may be sent as."""
    body_schema: str | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)


ID = Param("id", "path", "Queue entry ID, e.g. `q000012`.", required=True)
SWEEP_ID = Param("id", "path", "Sweep ID, e.g. `lr-sweep-s12`.", required=True)
ENTRY_ERRORS = {404: "No such entry, or one of another team (the same answer).", 401: "A token is required."}
CONFLICT = {409: "The entry's state does not allow it (e.g. hold a running entry)."}

OPERATIONS: tuple[Operation, ...] = (
    Operation("post", "/v1/jobs", "Submit a job or a sweep spec (YAML or JSON).",
              {201: "The stored entries (one per trial for a sweep).", 400: "An invalid spec, located.",
               403: "A driver or namespace not allowed, or another team's spec.",
               409: "Idempotency key of another team.",
               413: "The spec (or the sweep's stored size) is too large."}, "Entries",
              (Param("Idempotency-Key", "header", "Submitting again with the same key returns the first submission."),),
              body=("application/yaml", "application/json"), body_schema="Spec", tags=("jobs",)),
    Operation("get", "/v1/jobs", "List entries (a team's token sees its own team's).",
              {200: "Entries in queue order.", 400: "An unknown state or sort, a bad limit/offset or filter."},
              "Entries",
              (Param("state", "query", "Comma-separated states: queued,admitted,running,complete,failed,cancelled,"
                                      "dependency-failed,reclaimed."),
               Param("sweep", "query", "Only the trials of this sweep."),
               Param("team", "query", "Only this team's entries (a team's token: another team's name finds none)."),
               Param("name", "query", "Only entries whose name matches this glob (`*`, `?`, `[abc]`; `[!abc]` "
                                      "or `[^abc]` negate; case-sensitive)."),
               Param("limit", "query", "At most this many entries (default: all).", "integer"),
               Param("offset", "query", "Skip this many entries first.", "integer"),
               Param("eta", "query", "`true` adds each queued entry's expected start (`eta`; null: unknown), from "
                                     "the runtime estimates."),
               Param("sort", "query", "`submitted` (default: submission order) or `position`: queued entries in the "
                                      "order the scheduler decides in, then queued ones it does not consider (held, "
                                      "after:, beyond max_parallel), then admitted and running, then ended; "
                                      "`limit`/`offset` cut pages of that order.")), tags=("jobs",)),
    Operation("get", "/v1/jobs/{id}", "One entry, with its wait reason, placements and GPU usage.",
              {200: "The entry.", **ENTRY_ERRORS}, "Entry", (ID,), tags=("jobs",)),
    Operation("delete", "/v1/jobs/{id}", "Cancel an entry; a live one's Nomad job is stopped.",
              {200: "The entry, cancelled (or as it ended).", **ENTRY_ERRORS}, "Entry", (ID,), tags=("jobs",)),
    Operation("patch", "/v1/jobs/{id}", "Change an entry's priority: `{\"priority\": N}`, N from 1 to 100.",
              {200: "The entry.", 400: "Not a JSON object, an unknown field or a bad priority.", **ENTRY_ERRORS,
               **CONFLICT}, "Entry", (ID,), body=("application/json",), body_schema="Patch", tags=("jobs",)),
    Operation("post", "/v1/jobs/{id}/hold", "Keep a queued entry's place but admit nothing for it.",
              {200: "The entry, held.", **ENTRY_ERRORS, **CONFLICT}, "Entry", (ID,), tags=("jobs",)),
    Operation("post", "/v1/jobs/{id}/release", "Let a held entry be admitted again.",
              {200: "The entry.", **ENTRY_ERRORS, **CONFLICT}, "Entry", (ID,), tags=("jobs",)),
    Operation("post", "/v1/jobs/{id}/requeue", "Stop a live entry's job and queue it again (no retry used).",
              {200: "The entry.", **ENTRY_ERRORS, **CONFLICT}, "Entry", (ID,), tags=("jobs",)),
    Operation("post", "/v1/jobs/{id}/keep", "Postpone a running job's idle reclaim: `{\"for\": \"2h\"}` (default "
              "1 h), at most its class's `max_keep`.",
              {200: "Until when it is kept.", 400: "Not JSON, an unknown field, a bad duration or one past max_keep.",
               **ENTRY_ERRORS, 409: "Not running, or its class is never taken back for being idle."}, "Kept", (ID,),
              body=("application/json",), tags=("jobs",)),
    Operation("get", "/v1/jobs/{id}/allocations",
              "The current attempt's allocations as Nomad reports them, the entry's times and its Nomad UI page.",
              {200: "Allocations and times.", **ENTRY_ERRORS, 502: "Nomad could not be read.",
               503: "No Nomad client."}, "Allocations", (ID,), tags=("nomad",)),
    Operation("get", "/v1/jobs/{id}/hcl", "The HCL Nomad stored with the job's current version.",
              {200: "The HCL.", **ENTRY_ERRORS, 409: "The entry was never sent to Nomad.",
               502: "Nomad could not be read."},
              "Hcl", (ID,), tags=("nomad",)),
    Operation("get", "/v1/jobs/{id}/logs",
              "A task's stdout or stderr from `offset` to its end, read from Nomad's client. Headers: `X-Log-Offset` "
              "(the offset after these bytes), `X-Log-Ended` (`true` once the allocation ended), `X-Allocation-Id`, "
              "`X-Task`.",
              {200: "The log's bytes.", 400: "A bad type or offset, or a group running several tasks without task=.",
               **ENTRY_ERRORS, 409: "The entry is queued.", 502: "Nomad could not be read."}, "text",
              (ID, Param("type", "query", "`stdout` (default) or `stderr`."),
               Param("offset", "query", "Byte offset to read from (default 0).", "integer"),
               Param("group", "query", "Task group (default: the first)."),
               Param("index", "query", "Group member (default: the first).", "integer"),
               Param("task", "query", "Task, when the group runs several.")), tags=("nomad",)),
    Operation("get", "/v1/sweeps", "The caller's team's sweeps (an admin's: all), newest first.",
              {200: "Sweeps.", 400: "An unknown state."}, "Sweeps",
              (Param("state", "query", "Comma-separated states: only sweeps with a trial in one of them."),),
              tags=("sweeps",)),
    Operation("get", "/v1/usage", "GPU accounting over a window: GPU-hours (GPU-equivalents x time held, per attempt), "
              "jobs, attempts, mean and p95 wait, failures, by team, class, kind, model, user or sweep (a team's "
              "token: its team).",
              {200: "The report.", 400: "A bad `since` (not a finite time, negative, or after now) or `by`."},
              "UsageReport",
              (Param("since", "query", "How far back: `30d` (default), `12h`, `90m`, seconds, or an epoch time; "
                     "finite, not negative, not after now."),
               Param("by", "query", "`team` (default), `class`, `kind`, `model`, `user` (the `user:` of the "
                                    "token that submitted it) or `sweep`.")), tags=("accounting",)),
    Operation("get", "/v1/sweeps/{id}", "A sweep's trials and their counts by state.",
              {200: "The sweep.", 404: "No such sweep (for this team)."}, "Sweep", (SWEEP_ID,), tags=("sweeps",)),
    Operation("delete", "/v1/sweeps/{id}", "Cancel a sweep: queued trials dropped, running ones stopped.",
              {200: "The sweep's trials as they are now.", 404: "No such sweep (for this team)."}, "Sweep",
              (SWEEP_ID,), tags=("sweeps",)),
    Operation("get", "/v1/inventory", "Nodes with their GPUs, MIG instances and shares, free and total.",
              {200: "Nodes."}, "Inventory", tags=("cluster",)),
    Operation("get", "/v1/status", "Service health and counts.", {200: "Status."}, "Status", tags=("cluster",)),
    Operation("get", "/v1/teams", "GPU-equivalents in use, quota and fair share per team.", {200: "Teams."}, "Teams",
              tags=("cluster",)),
    Operation("get", "/v1/history", "GPUs in use, queue depth and admissions per minute over 24 hours.",
              {200: "Per-minute history."}, "History", tags=("cluster",)),
    Operation("get", "/v1/whoami", "The caller's team (null: an admin token), as the dashboard's header shows it.",
              {200: "The caller."}, "Whoami", tags=("operations",)),
    Operation("get", "/metrics", "Prometheus metrics (text exposition format). A team token sees its own team's "
              "series and the others summed as `another team`; with `metrics_open`, a scrape without a token sees "
              "every team summed as `_all` (`metrics_open_teams: true` shows them).", {200: "Metrics."}, "text",
              tags=("operations",)),
    Operation("get", "/openapi.json", "This description.", {200: "The OpenAPI document."}, "OpenApi",
              tags=("operations",)),
    Operation("get", "/ui", "The dashboard (served without a token; its data comes from the routes above).",
              {200: "The page."}, "html", tags=("dashboard",)),
    Operation("get", "/ui/", "The dashboard.", {200: "The page."}, "html", tags=("dashboard",)),
    Operation("get", "/ui/{name}", "The dashboard's static files.", {200: "The file.", 404: "No such file."}, "html",
              (Param("name", "path", "File name.", required=True),), tags=("dashboard",)),
)


_REF = "#/components/schemas/"
_S = {"type": "string"}
PAYLOADS: tuple[type[payloads.Payload], ...] = (
    payloads.ErrorReply, payloads.Patch, payloads.Entry, payloads.Entries, payloads.Allocations, payloads.Hcl,
    payloads.Sweep, payloads.Inventory, payloads.Status, payloads.Teams, payloads.History, payloads.Sweeps,
    payloads.UsageReport, payloads.Whoami, payloads.Kept,
)
"""The answers' (and the PATCH body's) schemas come from their payload types: one definition of each shape."""


def schemas() -> JSON:
    """Every component schema: the payloads', the spec's (validated by the render layer, described in the
    README) and this document's own."""
    out: JSON = {"Spec": {"type": "object", "description": "A job or sweep spec (see jobspecs/ and the README)."}}
    for cls in PAYLOADS:
        json_schema(cls, out, _REF)
    entry = out["Entry"]["properties"]
    entry["state"] = {"enum": [s.value for s in EntryState], "description": entry["state"]["description"]}
    out["OpenApi"] = {"type": "object"}
    return out


SCHEMAS: JSON = schemas()


def _content(schema: str) -> JSON:
    if schema == "text":
        return {"text/plain": {"schema": _S}}
    if schema == "html":
        return {"text/html": {"schema": _S}}
    return {"application/json": {"schema": {"$ref": _REF + schema}}}


def _operation(op: Operation) -> JSON:
    out: JSON = {"summary": op.summary, "operationId": f"{op.method}_{op.path}", "tags": list(op.tags),
                 "responses": {}}
    if op.params:
        out["parameters"] = [{"name": p.name, "in": p.where, "required": p.required or p.where == "path",
                              "description": p.description, "schema": {"type": p.type}} for p in op.params]
    if op.body:
        schema = {"$ref": _REF + op.body_schema} if op.body_schema else {"type": "object"}
        out["requestBody"] = {"required": True, "content": {m: {"schema": schema} for m in op.body}}
    for status, description in sorted(op.responses.items()):
        body = _content(op.schema) if status < 300 and op.schema else _content("Error")
        out["responses"][str(status)] = {"description": description, "content": body}
    return out


def document() -> JSON:
    paths: JSON = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {"title": "nomad-gpu", "version": __version__,
                 "description": "The HTTP API of the nomad-gpu service: a GPU queue for HashiCorp Nomad. Send a "
                                "token as `Authorization: Bearer <token>` (or `X-Nomad-Gpu-Token`) where one is "
                                "configured; errors are JSON `{\"error\": \"...\"}`. A state change with a body "
                                "is JSON or YAML (`Content-Type`, else 415); a POST without a body (hold, release, "
                                "requeue) carries `X-Nomad-Gpu-Client` (any value) or a token (else 403), which a "
                                "web page cannot send cross-site; a DELETE needs neither (a page can send one only "
                                "after a preflight, never granted); a foreign `Origin` is refused (403)."},
        "components": {"schemas": SCHEMAS,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}, {}],
        "paths": paths,
    }


def markdown(doc: JSON) -> str:
    """docs/api.md: every route with its parameters, body and answers."""
    lines = ["# The nomad-gpu HTTP API", "",
             "<!-- generated from nomad_gpu/service/http/openapi.py by `make api-docs`; do not edit by hand -->", "",
             doc["info"]["description"], "", "The same description is served as OpenAPI 3.1 at `/openapi.json`.", "",
             "| method | path | what |", "|---|---|---|"]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            lines.append(f"| {method.upper()} | `{path}` | {op['summary'].split(' Headers:')[0]} |")
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            lines += ["", f"## {method.upper()} `{path}`", "", op["summary"], ""]
            for p in op.get("parameters", []):
                needed = ", required" if p["required"] else ""
                lines.append(f"- `{p['name']}` ({p['in']}, {p['schema']['type']}{needed}): {p['description']}")
            if "requestBody" in op:
                media = ", ".join(f"`{m}`" for m in op["requestBody"]["content"])
                lines.append(f"- body: {media}")
            for status, answer in op["responses"].items():
                media = next(iter(answer["content"]))
                ref = answer["content"][media]["schema"].get("$ref", "")
                shape = f" `{ref.rsplit('/', 1)[-1]}`" if ref else f" ({media})"
                lines.append(f"- **{status}**{shape}: {answer['description']}")
    lines += ["", "## Schemas", ""]
    for name, schema in doc["components"]["schemas"].items():
        props = ", ".join(f"`{k}`" for k in schema.get("properties", {}))
        lines.append(f"- `{name}`: {props or schema.get('description', 'a JSON object')}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover - `make api-docs`
    if sys.argv[1:] == ["--json"]:
        print(json.dumps(document(), indent=2))
    else:
        sys.stdout.write(markdown(document()))
