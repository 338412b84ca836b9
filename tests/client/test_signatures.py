"""The Python client offers every parameter the HTTP API has, under the API's names, and
sends each one: its calls are compared with the app's OpenAPI document (``app.openapi()``),
so a parameter added to a route and not to the client fails here, not in a user's hands
(as ``search() got an unexpected keyword argument 'filter'`` once did)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from memory_service.client import AsyncMemoryClient, MemoryClient, calls

# what the client takes that no operation names: the import body (JSON lines, not a JSON
# object), and update's way to send ``expires_at: null``
CLIENT_ONLY = {"import_lines": {"lines"}, "update": {"clear_expiry"}}

# one valid value per parameter name, to build every call with everything given
SAMPLES: dict[str, Any] = {
    "user_id": "alice",
    "memory_id": "00000000-0000-0000-0000-000000000000",
    "session_id": "s1",
    "agent_id": "support",
    "facts": ["Alice is allergic to peanuts"],
    "query": "peanuts",
    "top_k": 3,
    "threshold": 0.1,
    "mode": "bm25",
    "filter": {"kind": ["fact"], "as_of": "2026-01-01T00:00:00Z"},
    "scopes": ["user", "agent"],
    "limit": 7,
    "cursor": "abc",
    "include_inactive": True,
    "kind": ["fact"],
    "tags_any": ["travel"],
    "tags_all": ["work"],
    "min_importance": 5,
    "key": "user.city",
    "created_after": "2026-01-01T00:00:00Z",
    "created_before": "2026-02-01T00:00:00Z",
    "as_of": "2026-03-01T00:00:00Z",
    "needs_verification": True,
    "importance": 7,
    "confidence": 0.5,
    "tags": ["t"],
    "expires_at": "2030-01-01T00:00:00Z",
    "clear_expiry": False,
    "messages": [{"role": "user", "content": "hello"}],
    "expected_version": 3,
    "compact": False,
    "keep_last": 2,
    "include_log": True,
    "ref": "r1",
    "start_line": 1,
    "end_line": 2,
    "message": "Where do I live?",
    "force": True,
    "lines": [{"text": "x"}],
}
SCALAR_SCOPE = {"get", "confirm", "delete", "read_memory_md"}  # one scope: one fact, one document


def _sample(builder: str, name: str) -> Any:
    if name == "scope":
        return "agent" if builder in SCALAR_SCOPE else ["user", "agent"]
    if name == "kind" and builder == "update":
        return "preference"
    return SAMPLES[name]


@pytest.fixture(scope="module")
def openapi(tmp_path_factory, embedder) -> dict[str, Any]:
    from memory_service.api import create_app
    from memory_service.api.keys import ApiKeyRing
    from memory_service.config import load_settings
    from memory_service.services import build_services

    settings = load_settings(workspace=tmp_path_factory.mktemp("openapi") / "ws")
    services = build_services(settings, embedder=embedder)
    try:
        return create_app(services, ApiKeyRing({})).openapi()
    finally:
        services.close()


def _operations(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, str]]:
    """Each operation's parameters, name -> where (``path``, ``query``, ``body``)."""
    schemas = doc["components"]["schemas"]
    out: dict[tuple[str, str], dict[str, str]] = {}
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            params = {p["name"]: p["in"] for p in op.get("parameters", [])}
            content = op.get("requestBody", {}).get("content", {})
            schema = content.get("application/json", {}).get("schema", {})
            # an optional body is ``anyOf: [{$ref}, {type: null}]``
            refs = [schema.get("$ref"), *(s.get("$ref") for s in schema.get("anyOf", ()))]
            ref = next((r for r in refs if r), None)
            if ref is not None:
                body = schemas[ref.rsplit("/", 1)[-1]]
                params.update(dict.fromkeys(body.get("properties", {}), "body"))
            out[(method.upper(), path)] = params
    return out


def _parameters(builder: str) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(getattr(calls, builder)).parameters)


def test_every_operation_has_one_client_call(openapi):
    claimed = list(calls.OPERATIONS.values())
    assert len(claimed) == len(set(claimed)), "two client calls claim one operation"
    assert set(claimed) == set(_operations(openapi)), "client calls and API operations differ"


@pytest.mark.parametrize("builder", sorted(calls.OPERATIONS))
def test_each_call_takes_exactly_the_operations_parameters(openapi, builder):
    api = _operations(openapi)[calls.OPERATIONS[builder]]
    offered = set(_parameters(builder))
    assert set(api) - offered == set(), f"{builder} lacks API parameters"
    assert offered - set(api) - CLIENT_ONLY.get(builder, set()) == set(), (
        f"{builder} takes parameters the API does not name"
    )


@pytest.mark.parametrize("builder", sorted(calls.OPERATIONS))
def test_each_parameter_given_reaches_the_request(openapi, builder):
    """Offered is not enough: built with every parameter, the request carries each one where
    the OpenAPI document says (path, query string or JSON body)."""
    method, template = calls.OPERATIONS[builder]
    api = _operations(openapi)[(method, template)]
    args = {name: _sample(builder, name) for name in _parameters(builder)}
    call = getattr(calls, builder)(**args)
    assert (call.method, _template_of(call.path, template, args)) == (method, template)
    body = call.json if isinstance(call.json, dict) else {}
    for name, where in api.items():
        if where == "path":
            assert str(args[name]) in call.path, (builder, name)
        elif where == "query":
            assert name in call.params, f"{builder}: {name} is not sent"
        else:
            assert name in body, f"{builder}: {name} is not in the body"


def _template_of(path: str, template: str, args: dict[str, Any]) -> str:
    for name, value in args.items():
        path = path.replace(str(value), "{" + name + "}") if f"{{{name}}}" in template else path
    return path


@pytest.mark.parametrize("builder", sorted(calls.OPERATIONS))
def test_both_clients_have_the_call_with_its_signature(builder):
    expected = list(_parameters(builder))
    for client in (MemoryClient, AsyncMemoryClient):
        method = getattr(client, builder)
        assert list(inspect.signature(method).parameters) == ["self", *expected], client
    assert inspect.iscoroutinefunction(AsyncMemoryClient.__dict__[builder])
