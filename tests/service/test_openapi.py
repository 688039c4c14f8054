"""The OpenAPI description covers every route the app answers, and docs/api.md is generated from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.routing import Route
from starlette.testclient import TestClient

from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.openapi import OPERATIONS, document, markdown
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"


class NoActuator:
    def submit(self, *args: Any, **kwargs: Any) -> str:
        raise AssertionError("no registration expected")

    def stop(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("no stop expected")


def app_operations() -> set[tuple[str, str]]:
    service = SchedulerService(SqliteStore(), NoActuator(), SchedulingSettings())  # type: ignore[arg-type]
    try:
        app = create_app(service)
        found = set()
        for route in app.routes:
            assert isinstance(route, Route), f"{route!r}: describe mounts in the OpenAPI table too"
            for method in route.methods or ():
                if method != "HEAD":  # Starlette adds HEAD to every GET
                    found.add((method.lower(), route.path))
        return found
    finally:
        service.stop()


def test_every_route_is_described_and_nothing_else() -> None:
    described = {(method, path) for path, ops in document()["paths"].items() for method in ops}
    served = app_operations()
    assert served - described == set(), "routes the OpenAPI document does not describe"
    assert described - served == set(), "described routes the app does not answer"
    assert len(described) == len(OPERATIONS), "each operation is described once"


def test_the_document_is_served_and_its_references_resolve() -> None:
    service = SchedulerService(SqliteStore(), NoActuator(), SchedulingSettings())  # type: ignore[arg-type]
    try:
        body = TestClient(create_app(service)).get("/openapi.json").json()
    finally:
        service.stop()
    assert body["openapi"] == "3.1.0" and body == document()
    schemas = body["components"]["schemas"]

    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            own = [node["$ref"]] if "$ref" in node else []
            return own + [r for v in node.values() for r in refs(v)]
        if isinstance(node, list):
            return [r for v in node for r in refs(v)]
        return []

    for ref in refs(body):
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[-1] in schemas, ref
    for path, ops in body["paths"].items():
        for method, op in ops.items():
            names = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert names == {seg[1:-1] for seg in path.split("/") if seg.startswith("{")}, (method, path)
            assert any(code.startswith("2") for code in op["responses"]), (method, path)


def test_docs_api_md_is_generated_from_the_description() -> None:
    assert DOCS.read_text(encoding="utf-8") == markdown(document()), \
        "docs/api.md is stale: regenerate it with `make api-docs`"
