"""The Nomad HTTP client: python-nomad, configured from Nomad's own variables, with its gaps closed.

Fixed at this edge (reference/nomad-api.md section 10): TLS verification is on unless
NOMAD_SKIP_VERIFY says otherwise (python-nomad defaults it off), NOMAD_CACERT and
NOMAD_TLS_SERVER_NAME are honoured (python-nomad ignores them), job submissions carry their HCL
source, and every failure becomes one of our own errors, retryable or permanent. The token is sent,
never logged. The settings and the session are :mod:`nomad_gpu.nomad.connection`; the event stream's
bytes are split into frames by :mod:`nomad_gpu.nomad.framing`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import nomad
import nomad.api.exceptions as nomad_exc
import requests
import urllib3

from nomad_gpu.domain.errors import NomadGpuError
from nomad_gpu.nomad import replies
from nomad_gpu.nomad.connection import NomadSettings, ServerNameAdapter, environment_read_once
from nomad_gpu.nomad.framing import arrivals, ndjson

T = TypeVar("T")
R = TypeVar("R")


class NomadError(NomadGpuError):
    """Nomad said no, or could not be reached."""

    retryable = False


class NomadUnavailable(NomadError):
    """Connection refused, timeout, 5xx without a clear verdict: try again later."""

    retryable = True


class NomadForbidden(NomadUnavailable):
    """403: the token lacks a capability. Not a verdict on the job: an operator must fix the token, and
    nothing is marked failed meanwhile (admissions pause, entries keep their place)."""


class NomadRejected(NomadError):
    """Nomad refused the request (bad job, permission denied): retrying the same will not help."""


class NomadNotFound(NomadRejected):
    """The object does not exist (404)."""


class NomadJobExists(NomadRejected):
    """A create-only register found the job already there (`EnforceIndex` with index 0)."""


# the text of Nomad's refusal: RegisterEnforceIndexErrPrefix + " 0: job already exists" (nomad/job_endpoint.go, v2.0.5)
_JOB_EXISTS = "job already exists"


def _translate(call: Callable[[], T], what: str) -> T:
    """Run a python-nomad call; every failure leaves as a NomadError with the cause chained."""
    try:
        return call()
    except nomad_exc.URLNotFoundNomadException as exc:
        raise NomadNotFound(f"{what}: {_text(exc)}") from exc
    except nomad_exc.URLNotAuthorizedNomadException as exc:
        raise NomadForbidden(f"{what}: permission denied ({_text(exc)}); check the token's ACL policy") from exc
    except nomad_exc.BadRequestNomadException as exc:
        raise NomadRejected(f"{what}: {_text(exc)}") from exc
    except nomad_exc.BaseNomadException as exc:
        if isinstance(cause := getattr(exc, "nomad_resp", None), requests.RequestException):
            # python-nomad wraps a connection failure in its base exception: say it in one line
            raise NomadUnavailable(f"{what}: {unreachable(cause)}") from exc
        status = getattr(getattr(exc, "nomad_resp", None), "status_code", None)
        text = _text(exc)
        # jobspec validation errors come back as 500 text (reference section 6): a verdict on the job; any
        # other 500 (no leader, an RPC or raft error, a timeout) says nothing about it and is retried
        if status == 500 and _is_verdict(text):
            raise NomadRejected(f"{what}: {text}") from exc
        raise NomadUnavailable(f"{what}: HTTP {status}: {text}") from exc
    except (requests.ConnectionError, requests.Timeout) as exc:
        raise NomadUnavailable(f"{what}: {unreachable(exc)}") from exc
    except requests.RequestException as exc:
        raise NomadUnavailable(f"{what}: {exc}") from exc


def unreachable(exc: requests.RequestException) -> str:
    """`cannot reach Nomad at http://127.0.0.1:4646: connection refused`: where, and why in words, instead of
    urllib3's nested `HTTPConnectionPool(...): Max retries exceeded ... NewConnectionError(...)`."""
    url = getattr(getattr(exc, "request", None), "url", None) or ""
    scheme, _, rest = str(url).partition("://")
    where = f" at {scheme}://{rest.split('/', 1)[0]}" if rest else ""
    text = str(exc).lower()
    if isinstance(exc, requests.Timeout) or "timed out" in text:
        why = "no answer in time"
    elif "refused" in text:
        why = "connection refused"
    elif "name or service not known" in text or "nodename nor servname" in text or "failed to resolve" in text:
        why = "the host name does not resolve"
    elif isinstance(exc, requests.exceptions.SSLError) and "certificate verify failed" in text:
        why = "certificate not trusted: set NOMAD_CACERT to the CA file that signed Nomad's certificate"
    elif isinstance(exc, requests.exceptions.SSLError):
        why = "TLS handshake failed (check NOMAD_CACERT / NOMAD_SKIP_VERIFY)"
    else:
        why = type(exc).__name__
    return f"cannot reach Nomad{where}: {why}"


# How Nomad words a refusal of the job itself (`nomad/structs` Validate errors, wrapped by go-multierror as
# "N error(s) occurred"; the register hooks' namespace/pool checks; EnforceIndex), v2.0.5
_VERDICTS = ("error occurred", "errors occurred", "validation failed", "nonexistent namespace",
             "nonexistent node pool", "enforcing job modify index", "job already exists", "failed to parse")


def _is_verdict(text: str) -> bool:
    low = text.lower()
    return any(marker in low for marker in _VERDICTS)


def _text(exc: BaseException) -> str:
    resp = getattr(exc, "nomad_resp", None)
    text = getattr(resp, "text", None)
    return (text or str(exc)).strip()


def refuse_redirects(resp: requests.Response, *args: Any, **kwargs: Any) -> requests.Response:
    """A response hook: Nomad's API never redirects, and requests would follow one carrying the
    `X-Nomad-Token` header to wherever it points (it strips only `Authorization` across hosts). Runs
    before requests resolves redirects, so nothing is sent to the new location."""
    if resp.is_redirect:
        resp.close()
        where = resp.headers.get("location", "")[:200]
        raise NomadUnavailable(f"Nomad answered HTTP {resp.status_code}, a redirect to {where!r}: not followed "
                               "(the token would go with it); point NOMAD_ADDR at Nomad itself")
    return resp


class NomadClient:
    """The calls the service makes, each returning plain JSON and raising only NomadError."""

    def __init__(self, settings: NomadSettings, session: requests.Session | None = None) -> None:
        self.settings = settings
        self.session = session or environment_read_once(settings.address)
        if refuse_redirects not in self.session.hooks.setdefault("response", []):
            self.session.hooks["response"].append(refuse_redirects)
        if settings.tls_server_name:
            self.session.mount("https://", ServerNameAdapter(settings.tls_server_name))
        cert = (settings.client_cert or "", settings.client_key or "")
        self.api = nomad.Nomad(
            address=settings.address.rstrip("/"), token=settings.token, namespace=settings.namespace,
            region=settings.region, verify=settings.verify, cert=cert, timeout=int(settings.timeout_s),
            session=self.session,
        )

    # ---- reads -------------------------------------------------------------------------------
    def leader(self) -> str:
        """The region's leader: the cheapest call that proves Nomad answers (`/v1/status/leader` needs no
        ACL token)."""
        leader = _translate(lambda: self.api.status.leader.get_leader(), "read the leader")
        if not leader:  # `Status.Leader` answers "" while the servers have no leader (nomad/status_endpoint.go, v2.0.5)
            raise NomadUnavailable("Nomad answers but its servers have no leader (GET /v1/status/leader is \"\")")
        return str(leader)

    @staticmethod
    def _shaped(check: Callable[[Any, str], R], value: Any, what: str) -> R:
        try:
            return check(value, what)
        except replies.MalformedReply as exc:
            raise NomadUnavailable(str(exc)) from exc

    def nodes(self, resources: bool = True) -> list[dict[str, Any]]:
        """Node stubs, with NodeResources (and so devices) unless ``resources`` is false (`Version` and such)."""
        return self._shaped(replies.objects, _translate(lambda: self.api.nodes.get_nodes(resources=resources or None),
                                                        "list nodes"), "list nodes")

    def server_members(self) -> dict[str, Any]:
        """`GET /v1/agent/members`: the servers of the gossip pool, with their versions (versions.py)."""
        what = "list server members"
        return self._shaped(replies.mapping, _translate(lambda: self.api.agent.get_members(), what), what)

    def node(self, node_id: str) -> dict[str, Any]:
        what = f"read node {node_id}"
        return self._shaped(replies.mapping, _translate(lambda: self.api.node.get_node(node_id), what), what)

    def allocations(self) -> list[dict[str, Any]]:
        """Every allocation with resources: the only list that carries device IDs (reference 3)."""
        return self._shaped(replies.objects, _translate(lambda: self.api.allocations.get_allocations(resources=True),
                                                        "list allocations"), "list allocations")

    def snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, dict[str, int]]:
        """Nodes and allocations (with resources), the raft index to resume the stream from, and what
        each list already reflects, by event topic.

        `X-Nomad-Index` is the index of the list's own table (`state.Index("nodes")`, `"allocs"`:
        nomad/node_endpoint.go and nomad/alloc_endpoint.go `List`, v2.0.5), not the raft index. A stream
        resumed from the lower of the two misses nothing the lists lack (a node written between the two
        lists is above it), and never replays the buffer's older events (`index=0` replays all of it,
        reference section 1); the events it does replay of the other table are older than its list,
        so the watcher skips those up to each table's index (the floors)."""
        nodes, node_index = self._list_indexed(self.api.nodes, "list nodes", {})
        allocs: list[dict[str, Any]] = []
        alloc_index: int | None = None
        for namespace in self.settings.watched:  # one list per watched namespace (`*` is one)
            listed, index = self._list_indexed(self.api.allocations, "list allocations", {"namespace": namespace})
            allocs.extend(listed)
            alloc_index = index if alloc_index is None else min(alloc_index, index)
        alloc_index = alloc_index or 0
        return nodes, allocs, min(node_index, alloc_index), {"Node": node_index, "Allocation": alloc_index}

    def _list_indexed(self, endpoint: Any, what: str, params: dict[str, str]) -> tuple[list[dict[str, Any]], int]:
        query = {"resources": "true", **params}
        resp = _translate(lambda: endpoint.request(method="get", params=query), what)
        try:
            index = int(resp.headers.get("X-Nomad-Index") or 0)
            listed = resp.json()
        except ValueError as exc:
            raise NomadUnavailable(f"{what}: the reply is not JSON") from exc
        return self._shaped(replies.objects, listed, what), index

    def namespaces(self) -> list[str]:
        """`GET /v1/namespaces`: the names of the namespaces this token may see (`NamespacesRequest`,
        command/agent/namespace_endpoint.go, v2.0.5)."""
        raw = _translate(lambda: self.api.namespaces.get_namespaces(), "list namespaces")
        if not isinstance(raw, list):
            raise NomadUnavailable("list namespaces: the reply is not a JSON list")
        return sorted(str(n["Name"]) for n in raw if isinstance(n, dict) and isinstance(n.get("Name"), str))

    def namespace(self, name: str) -> dict[str, Any] | None:
        """`GET /v1/namespace/:name` (`Namespace.GetNamespace`, nomad/namespace_endpoint.go, v2.0.5); None: none."""
        try:
            what = f"read namespace {name}"
            return self._shaped(replies.mapping, _translate(lambda: self.api.namespace.get_namespace(name), what), what)
        except NomadNotFound:
            return None

    def job(self, job_id: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            what = f"read job {job_id}"
            return self._shaped(replies.mapping, _translate(lambda: self.api.job.get_job(job_id, namespace=namespace),
                                                            what), what)
        except NomadNotFound:
            return None

    def job_allocations(self, job_id: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every allocation of one job (stubs: enough to tell whether all have ended)."""
        try:
            what = f"list allocations of {job_id}"
            return self._shaped(replies.objects, _translate(
                lambda: self.api.job.get_allocations(job_id, namespace=namespace), what), what)
        except NomadNotFound:
            return []

    def alloc_stats(self, alloc_id: str, timeout_s: float) -> dict[str, Any]:
        """`GET /v1/client/allocation/:id/stats`: the allocation's resource usage, devices included
        (`command/agent/alloc_endpoint.go` allocStats, v2.0.5; 404 once it is gone)."""
        what = f"read stats of allocation {alloc_id}"
        resp = _translate(lambda: self.api.client.allocation.request(alloc_id, "stats", method="get",
                                                                      timeout=timeout_s), what)
        try:
            return dict(resp.json())
        except (ValueError, TypeError) as exc:
            raise NomadUnavailable(f"{what}: the reply is not a JSON object") from exc

    def job_submission(self, job_id: str, version: int, namespace: str | None = None) -> dict[str, Any] | None:
        """`GET /v1/job/:id/submission?version=N`: the source registered with that version (`Source`,
        `Format`, ...), or None when Nomad kept none (`command/agent/job_endpoint.go`, v2.0.5)."""
        params: dict[str, Any] = {"version": str(version)}
        if namespace:
            params["namespace"] = namespace
        what = f"read the submission of job {job_id} version {version}"
        try:
            resp = _translate(lambda: self.api.job.request(job_id, "submission", method="get", params=params), what)
        except NomadNotFound:
            return None
        try:
            return dict(resp.json())
        except (ValueError, TypeError) as exc:
            raise NomadUnavailable(f"{what}: the reply is not a JSON object") from exc

    def task_logs(self, alloc_id: str, task: str, log_type: str, *, offset: int = 0, origin: str = "start",
                  timeout_s: float | None = None) -> bytes:
        """`GET /v1/client/fs/logs/:alloc_id` with `plain=true`, not followed: the log's bytes from
        ``offset`` (counted from ``origin``) to its end as the client holds it now
        (`command/agent/fs_endpoint.go` Logs, `client/fs_endpoint.go` logs, v2.0.5)."""
        params = {"task": task, "type": log_type, "plain": "true", "follow": "false", "offset": str(offset),
                  "origin": origin}
        what = f"read the {log_type} of task {task} in allocation {alloc_id}"
        resp = _translate(lambda: self.api.client.stream_logs.request(
            alloc_id, method="get", params=params, timeout=timeout_s or self.settings.timeout_s), what)
        return bytes(resp.content)

    # ---- writes ------------------------------------------------------------------------------
    def parse(self, hcl: str) -> dict[str, Any]:
        """HCL2 -> Job JSON through Nomad's own parser (`POST /v1/jobs/parse`)."""
        parsed = _translate(lambda: self.api.jobs.parse(hcl, canonicalize=False), "parse job")
        return self._shaped(lambda v, w: replies.mapping(v, w, ID=str), parsed, "parse job")

    def register(self, job: Mapping[str, Any], hcl: str, *, create_only: bool = False,
                 namespace: str | None = None) -> dict[str, Any]:
        """Register with the HCL source, so the UI's Definition tab shows what we rendered.

        `create_only` sends `EnforceIndex` with `JobModifyIndex` 0, which Nomad refuses when the job
        already exists (`nomad/job_endpoint.go` Register, v2.0.5): a retried register whose first reply
        was lost can never replace the allocation the first one started. Raises NomadJobExists then.
        """
        body: dict[str, Any] = {"Job": dict(job), "Submission": {"Source": hcl, "Format": "hcl2"}}
        if create_only:
            body.update(EnforceIndex=True, JobModifyIndex=0)
        params = {"namespace": namespace} if namespace else {}
        what = f"register job {job.get('ID')}"
        try:
            reply = _translate(lambda: self.api.jobs.request(method="post", json=body, params=params).json(), what)
        except NomadError as exc:
            if create_only and _JOB_EXISTS in str(exc):
                raise NomadJobExists(f"{what}: the job already exists") from exc
            raise
        return self._shaped(replies.registered, reply, what)

    def deregister(self, job_id: str, purge: bool = False, namespace: str | None = None) -> None:
        _translate(lambda: self.api.job.deregister_job(job_id, purge=purge, namespace=namespace),
                   f"stop job {job_id}")

    def stop_alloc(self, alloc_id: str) -> None:
        _translate(lambda: self.api.allocation.stop_allocation(alloc_id), f"stop allocation {alloc_id}")

    # ---- the event stream --------------------------------------------------------------------
    def event_stream(self, index: int, topics: Sequence[str], read_timeout_s: float = 60.0,
                     opened: Callable[[requests.Response], None] | None = None,
                     namespace: str | None = None) -> Iterator[dict[str, Any]]:
        """Frames of `/v1/event/stream` the moment each line arrives (heartbeats included, as `{}`).

        Written on the session rather than python-nomad's `get_stream`, which replays from the first
        index after a reconnect and dies silently on errors (reference section 10). Nomad frames the
        body two ways (`command/agent/event_endpoint.go`): up to 1.11.1 chunked, and from 1.11.2 a
        hijacked connection whose body ends only when it closes. `iter_content` waits for the end of
        such a body before it hands anything over, so the bytes are taken as the socket delivers them
        (`read1`), decoded (1.x gzips the stream when asked), and split into lines here.

        Ends when the body ends: from 1.11.2 that is also how a late error (ACL, token expiry,
        "subscription closed by server") shows. `read_timeout_s` is the longest silence allowed, not
        even a heartbeat; beyond it NomadUnavailable is raised. Raises NomadError on anything else.
        """
        params: list[tuple[str, str | int]] = [("index", index), *(("topic", t) for t in topics)]
        params.append(("namespace", namespace or self.settings.watch_namespace))
        if self.settings.region:
            params.append(("region", self.settings.region))
        headers = {"X-Nomad-Token": self.settings.token} if self.settings.token else {}
        url = f"{self.settings.address.rstrip('/')}/v1/event/stream"
        try:
            resp = self.session.get(url, params=params, headers=headers, stream=True, verify=self.settings.verify,
                                    cert=self.api.cert or None, timeout=(self.settings.timeout_s, read_timeout_s))
        except requests.RequestException as exc:
            raise NomadUnavailable(f"event stream: cannot connect ({type(exc).__name__})") from exc
        if opened is not None:
            opened(resp)  # lets the owner close the stream from another thread
        with resp:
            if resp.status_code in (401, 403):  # up to 1.11.1 an ACL refusal is a plain 403
                raise NomadForbidden(f"event stream: HTTP {resp.status_code}: {resp.text.strip()[:200]}")
            if resp.status_code != 200:
                err = NomadRejected if 400 <= resp.status_code < 500 else NomadUnavailable
                raise err(f"event stream: HTTP {resp.status_code}: {resp.text.strip()}")
            try:
                yield from ndjson(arrivals(resp))
            except urllib3.exceptions.ReadTimeoutError as exc:
                raise NomadUnavailable(f"event stream: no data for {read_timeout_s:g} s, "
                                       "not even a heartbeat") from exc
            except (urllib3.exceptions.HTTPError, requests.RequestException, AttributeError, ValueError,
                    OSError) as exc:  # closed under us, reset, undecodable: the stream is gone either way
                raise NomadUnavailable(f"event stream broke off ({type(exc).__name__})") from exc
