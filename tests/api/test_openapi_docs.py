"""The API documents itself truthfully: every operation lists the errors it can answer with
the real error body, and ``/docs`` works without internet (its assets come from a package)."""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.services import build_services

KEY = "acme-key-0123456789abcdef"
ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}


@pytest.fixture
def client(tmp_path, embedder, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    services = build_services(load_settings(workspace=tmp_path / "ws"), embedder=embedder)
    ring = ApiKeyRing({KEY: {"tenant": "acme", "role": "user"}})
    with TestClient(create_app(services, ring)) as test_client:
        yield test_client
    services.close()


def operations(spec):
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def error_schema(operation, status: int) -> dict | None:
    response = operation["responses"].get(str(status))
    if response is None:
        return None
    return response["content"]["application/json"]["schema"]


def test_every_v1_operation_lists_its_errors_with_the_error_body(client):
    spec = client.get("/openapi.json").json()
    v1 = [(m, p, op) for m, p, op in operations(spec) if p.startswith("/v1/")]
    assert len(v1) >= 17
    for method, path, operation in v1:
        where = f"{method.upper()} {path}"
        for status in (401, 403, 503):  # 403: a personal key naming another user
            assert error_schema(operation, status) == ERROR_REF, (where, status)
        if "requestBody" in operation:
            for status in (413, 415, 422):
                assert error_schema(operation, status) == ERROR_REF, (where, status)
        for status, response in operation["responses"].items():
            if status.startswith(("4", "5")):
                assert response["description"], (where, status)
                assert error_schema(operation, int(status)) == ERROR_REF, (where, status)

    by_route = {(m, p): op for m, p, op in operations(spec)}
    assert error_schema(by_route["get", "/v1/memories/{memory_id}"], 404) == ERROR_REF
    assert error_schema(by_route["post", "/v1/sessions/{session_id}/messages"], 409) == ERROR_REF
    assert error_schema(by_route["post", "/v1/maintenance/run"], 403) == ERROR_REF
    assert error_schema(by_route["post", "/v1/import"], 403) == ERROR_REF
    assert error_schema(by_route["post", "/v1/memories/search"], 404) is None  # no id to miss
    # FastAPI's own validation body is not what this API answers: it is not documented
    assert "HTTPValidationError" not in json.dumps(spec)

    schemas = spec["components"]["schemas"]
    body = schemas["ErrorResponse"]
    assert body["required"] == ["error"]
    assert body["properties"]["error"] == {"$ref": "#/components/schemas/ErrorObject"}
    assert set(schemas["ErrorObject"]["required"]) == {"code", "message"}


def test_the_documented_error_body_is_what_errors_answer(client):
    spec = client.get("/openapi.json").json()
    required = set(spec["components"]["schemas"]["ErrorObject"]["required"])
    answers = [
        client.get("/v1/memories", params={"user_id": "alice"}),  # 401
        client.get(
            "/v1/memories/nope", params={"user_id": "alice"}, headers={"X-API-Key": KEY}
        ),  # 404
        client.post(
            "/v1/memories/search",
            content=b"query=x",
            headers={"X-API-Key": KEY, "content-type": "application/x-www-form-urlencoded"},
        ),  # 415
        client.post("/v1/memories/search", json={"user_id": "a/../b"}, headers={"X-API-Key": KEY}),
    ]
    assert [a.status_code for a in answers] == [401, 404, 415, 422]
    for answer in answers:
        assert set(answer.json()) == {"error"} and required <= set(answer.json()["error"])


def test_docs_load_only_local_assets_that_answer(client):
    page = client.get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
    urls += re.findall(r"""url:\s*["']([^"']+)["']""", page.text)
    assert len(urls) >= 4, urls  # the script, the stylesheet, the icon, the document
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url  # no CDN, no other host
        answer = client.get(url)
        assert answer.status_code == 200, url
        assert answer.content, url
    assert "SwaggerUIBundle" in client.get("/docs/assets/swagger-ui-bundle.js").text
    assert client.get("/docs/assets/..%2F..%2Fetc%2Fpasswd").status_code == 404
    assert client.get("/docs/assets/index.j2").status_code == 404  # only the assets named


def test_the_docs_page_reads_the_document_in_the_version_its_swagger_ui_reads(client):
    """The packaged Swagger UI (4.x) refuses ``openapi: 3.1``: the page gets the same document
    in 3.0 forms, while ``/openapi.json`` stays 3.1."""
    original = client.get("/openapi.json").json()
    for_docs = client.get("/docs/openapi.json").json()
    assert original["openapi"].startswith("3.1") and for_docs["openapi"] == "3.0.3"
    assert set(for_docs["paths"]) == set(original["paths"])
    text = json.dumps(for_docs)
    assert '{"type": "null"}' not in text and '"const"' not in text
    assert not re.search(r'"exclusive(Minimum|Maximum)": \d', text)
    page = client.get("/docs").text
    assert "/docs/openapi.json" in page
