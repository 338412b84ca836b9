"""``GET /metrics`` scraped from a real app and parsed with ``prometheus_client``'s parser:
the counts change as a user of the API would expect them to."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.services import build_services
from tests.support.llm_server import server_error, text
from tests.support.waiting import wait_until

KEY = "acme-key-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {KEY}"}
PEANUTS = "- [fact|10|user.allergy] The user is allergic to peanuts."


def make(tmp_path, embedder, monkeypatch, **overrides):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    settings = load_settings(workspace=tmp_path / "ws", **overrides)
    services = build_services(settings, embedder=embedder)
    app = create_app(services, ApiKeyRing({KEY: {"tenant": "acme", "role": "user"}}))
    return services, TestClient(app)


@pytest.fixture
def client(tmp_path, embedder, monkeypatch):
    services, test_client = make(tmp_path, embedder, monkeypatch)
    with test_client:
        yield test_client
    services.close()


def scrape(client, headers=None) -> dict[tuple[str, tuple], float]:
    """Every sample of ``/metrics``: (name, sorted labels) -> value."""
    response = client.get("/metrics", headers=headers or {})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def record(client, *texts, key=None):
    facts = [{"text": t, **({"key": key} if key else {})} for t in texts]
    response = client.post(
        "/v1/memories", json={"user_id": "alice", "facts": facts}, headers=HEADERS
    )
    assert response.status_code == 200, response.text
    return response


def test_requests_are_counted_by_route_template_and_status(client):
    before = scrape(client)
    record(client, "Alice is allergic to peanuts")
    for _ in range(3):
        client.post(
            "/v1/memories/search", json={"user_id": "alice", "query": "peanuts"}, headers=HEADERS
        )
    for fact_id in ("missing-1", "missing-2"):
        assert client.get(f"/v1/memories/{fact_id}", params={"user_id": "alice"}, headers=HEADERS)
    assert client.post("/v1/memories/search", json={}, headers={}).status_code == 401
    after = scrape(client)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    requests = "memory_http_requests_total"
    assert delta(requests, method="POST", route="/v1/memories", status="200") == 1
    assert delta(requests, method="POST", route="/v1/memories/search", status="200") == 3
    assert delta(requests, method="POST", route="/v1/memories/search", status="401") == 1
    # two different ids, one series: the template, never the raw path
    assert delta(requests, method="GET", route="/v1/memories/{memory_id}", status="404") == 2
    assert not any("missing-1" in str(labels) for _, labels in after)
    latency = "memory_http_request_duration_seconds_count"
    assert delta(latency, method="POST", route="/v1/memories/search", status="200") == 3
    total = value(
        after,
        "memory_http_request_duration_seconds_sum",
        method="POST",
        route="/v1/memories/search",
        status="200",
    )
    assert total > 0
    # the scrape before this one is counted too, under its own route
    assert delta(requests, method="GET", route="/metrics", status="200") == 1


def test_retrieval_embedding_and_records_are_measured(client):
    record(client, "Alice is allergic to peanuts", "Alice lives in Lisbon")
    record(client, "Alice is allergic to peanuts")  # the same text: a duplicate
    record(client, "Alice works at Initech", key="user.employer")
    record(client, "Alice works at Globex", key="user.employer")  # supersedes Initech
    search = {"user_id": "alice", "query": "where does alice live", "mode": "hybrid"}
    assert client.post("/v1/memories/search", json=search, headers=HEADERS).status_code == 200
    samples = scrape(client)

    assert value(samples, "memory_records_total", status="created") == 3
    assert value(samples, "memory_records_total", status="duplicate") == 1
    assert value(samples, "memory_records_total", status="superseded") == 1
    assert value(samples, "memory_facts", backend="files") == 4  # the duplicate added nothing
    for stage in ("bm25", "dense", "fusion", "retrieve"):
        assert value(samples, "memory_retrieval_seconds_count", stage=stage) == 1, stage
    # one model call per record request (the duplicate's text included), then the search
    assert value(samples, "memory_embedding_seconds_count") >= 5
    assert value(samples, "memory_embedding_batch_size_sum") >= 2 + 1 + 1 + 1 + 1
    # a warm index: a second search embeds only its query, once
    assert client.post("/v1/memories/search", json=search, headers=HEADERS).status_code == 200
    again = scrape(client)
    for name in ("memory_embedding_seconds_count", "memory_embedding_batch_size_sum"):
        assert value(again, name) - value(samples, name) == 1, name
    assert value(again, "memory_retrieval_seconds_count", stage="retrieve") == 2

    fact_id = record(client, "Alice has a cat").json()["results"][0]["id"]
    deleted = client.delete(f"/v1/memories/{fact_id}", params={"user_id": "alice"}, headers=HEADERS)
    assert deleted.status_code == 200
    assert value(scrape(client), "memory_facts", backend="files") == 4


def test_two_apps_in_one_process_count_their_own_requests(tmp_path, embedder, monkeypatch):
    one_services, one = make(tmp_path / "one", embedder, monkeypatch)
    two_services, two = make(tmp_path / "two", embedder, monkeypatch)
    try:
        record(one, "Alice is allergic to peanuts")
        assert value(scrape(one), "memory_records_total", status="created") == 1
        assert value(scrape(two), "memory_records_total", status="created") == 0
    finally:
        one_services.close()
        two_services.close()


def test_flush_tokens_and_dead_letters_are_counted(
    tmp_path, embedder, monkeypatch, llm_server, script
):
    services, client = make(
        tmp_path,
        embedder,
        monkeypatch,
        llm={"base_url": llm_server.base_url, "model": "chat-model", "max_retries": 0},
    )
    try:
        script.chat(text("Noted!", prompt_tokens=40, completion_tokens=3), text("Sure."))
        script.flush(text(PEANUTS, prompt_tokens=90, completion_tokens=12))
        body = {"user_id": "alice", "session_id": "s1", "message": "I am allergic to peanuts."}
        assert client.post("/v1/chat", json=body, headers=HEADERS).status_code == 200
        samples = scrape(client)
        assert value(samples, "memory_pipeline_runs_total", job="flush", outcome="flushed") == 1
        assert value(samples, "memory_llm_tokens_total", purpose="chat", kind="prompt") == 40
        assert value(samples, "memory_llm_tokens_total", purpose="chat", kind="completion") == 3
        assert value(samples, "memory_llm_tokens_total", purpose="flush", kind="prompt") == 90
        assert value(samples, "memory_records_total", status="created") == 1
        assert value(samples, "memory_dead_letters_total", kind="flush") == 0

        script.flush(server_error(None), server_error(None))  # the flush and its one retry
        body["message"] = "I moved to Lisbon."
        assert client.post("/v1/chat", json=body, headers=HEADERS).status_code == 200
        samples = scrape(client)
        assert value(samples, "memory_pipeline_runs_total", job="flush", outcome="failed") == 1
        assert value(samples, "memory_dead_letters_total", kind="flush") == 1
    finally:
        services.close()


def test_maintenance_runs_are_counted(tmp_path, embedder, monkeypatch):
    admin = "acme-admin-0123456789abcdef"
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    services = build_services(load_settings(workspace=tmp_path / "ws"), embedder=embedder)
    ring = ApiKeyRing(
        {KEY: {"tenant": "acme", "role": "user"}, admin: {"tenant": "acme", "role": "admin"}}
    )
    try:
        with TestClient(create_app(services, ring)) as client:
            record(client, "Alice is allergic to peanuts")
            run = client.post(
                "/v1/maintenance/run",
                json={"user_id": "alice", "force": True},
                headers={"Authorization": f"Bearer {admin}"},
            )
            assert run.status_code == 200, run.text
            samples = scrape(client)
        assert value(samples, "memory_pipeline_runs_total", job="maintenance", outcome="ran") == 1
        assert value(samples, "memory_pipeline_runs_total", job="consolidation", outcome="ok") == 1
    finally:
        services.close()


def test_metrics_behind_a_key_when_the_setting_says_so(tmp_path, embedder, monkeypatch):
    services, client = make(
        tmp_path, embedder, monkeypatch, observability={"metrics_require_key": True}
    )
    try:
        refused = client.get("/metrics")
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
        assert (
            value(
                scrape(client, HEADERS),
                "memory_http_requests_total",
                method="GET",
                route="/metrics",
                status="401",
            )
            == 1
        )
    finally:
        services.close()


def test_metrics_turned_off_is_not_served(tmp_path, embedder, monkeypatch):
    services, client = make(tmp_path, embedder, monkeypatch, observability={"metrics": False})
    try:
        record(client, "Alice is allergic to peanuts")
        assert client.get("/metrics").status_code == 404
        assert "/metrics" not in client.get("/openapi.json").json()["paths"]
    finally:
        services.close()


def test_the_maintenance_scheduler_counts_into_the_app_it_was_started_for(
    tmp_path, embedder, monkeypatch
):
    """``serve`` starts the scheduler inside the app's sink: its thread's passes are scraped."""
    from datetime import timedelta

    from memory_service.observe.telemetry import using_sink
    from memory_service.pipeline.scheduler import MemoryMaintenanceScheduler, known_users

    services, client = make(tmp_path, embedder, monkeypatch)
    try:
        record(client, "Alice is allergic to peanuts")
        app = client.app
        scheduler = MemoryMaintenanceScheduler(
            app.state.maintenance,
            lambda: known_users(services.settings.workspace, services.longterm, ["acme"]),
            interval=timedelta(hours=1),
            first_delay=timedelta(seconds=0),
        )
        with using_sink(app.state.metrics):
            scheduler.start()
        try:
            wait_until(lambda: scheduler.passes, 30, message="the scheduler never ran")
        finally:
            scheduler.stop()
        assert scheduler.passes == 1
        samples = scrape(client)
        assert value(samples, "memory_pipeline_runs_total", job="maintenance", outcome="ran") == 1
    finally:
        services.close()
