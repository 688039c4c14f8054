"""The job endpoints of the dev cluster's HTTP app: list, register, parse, read, deregister a job, and its
submission, allocations, summary and evaluations.

One module per group of routes, each a function of what it reads (apikit.py says why).
"""

from __future__ import annotations

import functools

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from . import queries
from .apikit import Replies, flag, namespace_of, read_body
from .hcl import parse_job_hcl
from .jobs import JobRequestError, canonicalize
from .maxrun import has_max_run_duration
from .register import check_register_body, register_namespace, register_options
from .state import ClusterState
from .version import NomadVersion


def job_routes(state: ClusterState, replies: Replies, version: NomadVersion) -> list[Route]:
    reply, written, visible = replies.reply, replies.written, replies.visible

    async def jobs(request: Request) -> Response:
        if request.method == "GET":
            q = request.query_params  # `Job.List` answers max(jobs, job_summary) (nomad/job_endpoint.go, v2.0.5)
            return await run_in_threadpool(lambda: reply(visible(request, queries.list_jobs(
                state, namespace=namespace_of(request), prefix=q.get("prefix", ""), with_meta=flag(request, "meta"),
                filter_expr=q.get("filter", "")), "list-jobs"), ("jobs", "job_summary")))
        body = await read_body(request)
        job, submission = check_register_body(body)
        options = register_options(body)
        namespace = register_namespace(request.query_params.get("namespace"), options, job)
        return written(await run_in_threadpool(state.register, job, submission, namespace, options))

    async def parse(request: Request) -> Response:
        body = await read_body(request)
        text = body.get("JobHCL") if isinstance(body, dict) else None
        if not isinstance(text, str) or not text.strip():
            return PlainTextResponse("Job spec is empty", status_code=400)
        job = await run_in_threadpool(functools.partial(parse_job_hcl, text,
                                                        max_run_duration=has_max_run_duration(version)))
        return reply(canonicalize(job) if body.get("Canonicalize") else job)

    async def job(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        if request.method == "GET":
            return await run_in_threadpool(lambda: reply(queries.get_job(state, namespace_of(request), job_id)))
        if request.method == "DELETE":
            return written(await run_in_threadpool(state.deregister, namespace_of(request), job_id,
                                                 flag(request, "purge")))
        body = await read_body(request)
        job_json, submission = check_register_body(body)
        if job_json["ID"] != job_id:
            raise JobRequestError("Job ID does not match name")
        options = register_options(body)
        namespace = register_namespace(request.query_params.get("namespace"), options, job_json)
        return written(await run_in_threadpool(state.register, job_json, submission, namespace, options))

    def job_submission(request: Request) -> Response:
        return reply(queries.job_submission(state, namespace_of(request), request.path_params["job_id"],
                                            request.query_params.get("version")))

    def job_allocations(request: Request) -> Response:
        return reply(queries.job_allocations(state, namespace_of(request), request.path_params["job_id"],
                                             all_versions=flag(request, "all")))

    def job_evaluations(request: Request) -> Response:
        return reply(queries.job_evaluations(state, namespace_of(request), request.path_params["job_id"]))

    def job_summary(request: Request) -> Response:
        return reply(queries.job_summary(state, namespace_of(request), request.path_params["job_id"]))

    return [
        Route("/v1/jobs", jobs, methods=["GET", "POST", "PUT"]),
        Route("/v1/jobs/parse", parse, methods=["POST", "PUT"]),
        Route("/v1/job/{job_id}", job, methods=["GET", "POST", "PUT", "DELETE"]),
        Route("/v1/job/{job_id}/submission", job_submission, methods=["GET"]),
        Route("/v1/job/{job_id}/allocations", job_allocations, methods=["GET"]),
        Route("/v1/job/{job_id}/summary", job_summary, methods=["GET"]),
        Route("/v1/job/{job_id}/evaluations", job_evaluations, methods=["GET"]),
    ]
