"""Hostile input: schemathesis generates valid and invalid requests from the OpenAPI schema.

Every operation of the app gets ``--examples`` positive and as many negative cases (wrong
types, missing fields, out-of-range numbers, odd strings in paths, queries and bodies), sent
with a valid admin key through the ASGI app: the whole FastAPI stack, services built from
Settings (files backend, the loopback LLM as the model). Pass: no response >= 500, and every
error response has the uniform ``{"error": {"code", "message"}}`` body.

    .venv/bin/python -m tests.support.reliability.fuzz [--examples 200]
        [--json benchmarks/results/fuzz.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FUZZ_KEY = "fuzz-admin-key-0123456789"


@dataclass
class FuzzReport:
    cases: int = 0
    by_status: Counter = field(default_factory=Counter)
    by_operation: Counter = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    bad_error_bodies: list[str] = field(default_factory=list)
    no_cases: list[str] = field(default_factory=list)  # (operation, mode) with nothing to try

    @property
    def ok(self) -> bool:
        return not self.server_errors and not self.bad_error_bodies

    def to_dict(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "responses_5xx": sum(n for s, n in self.by_status.items() if s >= 500),
            "by_status": {str(s): n for s, n in sorted(self.by_status.items())},
            "operations": len(self.by_operation),
            "cases_by_operation": dict(sorted(self.by_operation.items())),
            "server_error_samples": self.server_errors[:20],
            "bad_error_bodies": self.bad_error_bodies[:20],
            "no_cases_possible": self.no_cases,
            "ok": self.ok,
        }


def _error_shape_ok(response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    error = body.get("error") if isinstance(body, dict) else None
    return (
        isinstance(error, dict)
        and isinstance(error.get("code"), str)
        and isinstance(error.get("message"), str)
    )


def fuzz_app(app, *, examples: int, seed: int | None = 0) -> FuzzReport:
    """Run ``examples`` positive and negative cases per operation of ``app``'s schema."""
    import schemathesis
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    report = FuzzReport()
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz_operation(operation, mode, report, examples=examples, seed=seed)
    return report


def _fuzz_operation(operation, mode, report: FuzzReport, *, examples: int, seed: int | None):
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis.errors import Unsatisfiable

    headers = {"Authorization": f"Bearer {FUZZ_KEY}"}
    label = f"{operation.method.upper()} {operation.path}"
    strategy = operation.as_strategy(generation_mode=mode, headers=headers)

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case) -> None:
        response = case.call(headers=headers)
        report.cases += 1
        report.by_status[response.status_code] += 1
        report.by_operation[label] += 1
        described = f"{label}: {response.status_code} {response.text[:200]}"
        if response.status_code >= 500:
            report.server_errors.append(described)
        elif response.status_code >= 400 and not _error_shape_ok(response):
            report.bad_error_bodies.append(described)

    if seed is not None:
        run = hypothesis_seed(seed)(run)
    try:
        run()
    except Unsatisfiable:  # nothing to break: e.g. no negative case exists for GET /healthz
        report.no_cases.append(f"{label} ({mode.value})")


def fuzz_services(workdir: Path, *, examples: int, embedder=None, seed: int | None = 0):
    """The app as ``serve`` builds it (files backend), with the loopback LLM as the model."""
    from memory_service.api import create_app
    from memory_service.api.keys import ApiKeyRing
    from memory_service.config import load_settings
    from memory_service.services import build_services
    from tests.support.llm_server import LlmTestServer
    from tests.support.reliability.isolation import echo_responder

    with LlmTestServer() as llm:
        llm.responder = echo_responder
        settings = load_settings(
            workspace=workdir / "ws",
            llm={"base_url": llm.base_url, "model": "chat", "context_window": 32_000},
        )
        services = build_services(settings, embedder=embedder)
        try:
            app = create_app(services, ApiKeyRing({FUZZ_KEY: {"tenant": "fuzz", "role": "admin"}}))
            return fuzz_app(app, examples=examples, seed=seed)
        finally:
            services.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=200, help="per operation and mode")
    parser.add_argument("--seed", type=int, default=None, help="fixed seed (default: random)")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/fuzz.json"))
    args = parser.parse_args()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        report = fuzz_services(Path(tmp), examples=args.examples, seed=args.seed)
    result = report.to_dict() | {"seconds": round(time.perf_counter() - began, 1)}
    print(json.dumps(result, indent=2))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    raise SystemExit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
