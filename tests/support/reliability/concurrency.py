"""Concurrency: many clients, mixed operations, one workspace; the final state must add up.

16 clients (4 per user, 2 per session; the same user and session ids in two tenants) run N
mixed operations each against real server processes: record, search (every mode), list,
delete, session append (half of them with ``expected_version``, so 409 conflicts are expected
and are the only errors allowed). At the end every user's facts must be exactly the
acknowledged records minus the acknowledged deletes, every session must hold exactly the
acknowledged appends (and its version must count them), and no read may have shown a fact of
another user. With ``--servers 2`` the clients are split over two processes on one files
workspace: the per-user file locks make that safe.

    .venv/bin/python -m tests.support.reliability.concurrency [--clients 16] [--ops 1000]
        [--servers 1|2] [--backend files|qdrant] [--json benchmarks/results/concurrency.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from indexing.hashing import content_hash
from memory_service.domain.facts import fact_id
from tests.support.reliability.workload import fact_text, list_facts, sentence
from tests.support.server import ServerProcess, bearer, write_keys

TENANTS = ("acme", "globex")
MODES = ("hybrid", "bm25", "dense")


@dataclass
class Shared:
    """What all clients acknowledged, for the final check."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    facts: dict[tuple[str, str], dict[str, str]] = field(default_factory=lambda: defaultdict(dict))
    deleted: set[str] = field(default_factory=set)
    appends: dict[tuple[str, str, str], list[str]] = field(
        default_factory=lambda: defaultdict(list)
    )
    versions: Counter = field(default_factory=Counter)  # acknowledged appends per session
    statuses: Counter = field(default_factory=Counter)  # (op, status)
    errors: list[str] = field(default_factory=list)
    foreign_reads: int = 0
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


class Client(threading.Thread):
    """One client: its own connection, user and session (shared with other clients)."""

    def __init__(
        self, index: int, base_url: str, key: str, tenant: str, ops: int, shared: Shared
    ) -> None:
        super().__init__(daemon=True, name=f"client{index}")
        self.http = httpx.Client(base_url=base_url, headers=bearer(key), timeout=120.0)
        # 4 clients per (tenant, user); the same user and session ids in both tenants
        self.tenant, self.user = tenant, f"u{(index // 2) % 2}"
        self.session = f"s{(index // 4) % 2}"  # 2 clients per session
        self.prefix = f"{tenant}/{self.user}:"
        self.ops, self.shared, self.index = ops, shared, index
        self.rng = random.Random(index)
        self.serial = 0
        self.version = 0
        self.mine: list[str] = []

    def _tag(self) -> str:
        self.serial += 1
        return f"k{self.index}n{self.serial}"

    def _call(self, op: str, method: str, url: str, **kwargs: Any) -> httpx.Response | None:
        began = time.perf_counter()
        try:
            response = self.http.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            with self.shared.lock:
                self.shared.statuses[(op, "transport")] += 1
                self.shared.errors.append(f"{op}: {type(exc).__name__}: {exc}")
            return None
        with self.shared.lock:
            self.shared.latencies[op].append(1000 * (time.perf_counter() - began))
            self.shared.statuses[(op, response.status_code)] += 1
            expected = response.status_code == 200 or (
                op == "append" and response.status_code == 409
            )
            if not expected:
                self.shared.errors.append(f"{op}: {response.status_code} {response.text[:200]}")
        return response

    def _check_owned(self, items: list[dict[str, Any]]) -> None:
        """Every fact a read shows must be this user's (its id is derived from the owner)."""
        for item in items:
            own = fact_id(self.tenant, self.user, content_hash(item["text"]))
            if item["id"] != own or not item["text"].startswith(self.prefix):
                with self.shared.lock:
                    self.shared.foreign_reads += 1

    def run(self) -> None:
        try:
            for _ in range(self.ops):
                roll = self.rng.random()
                if roll < 0.35:
                    self.record()
                elif roll < 0.6:
                    self.search()
                elif roll < 0.7:
                    self.list_page()
                elif roll < 0.8:
                    self.delete()
                else:
                    self.append()
        finally:
            self.http.close()

    def record(self) -> None:
        texts = [
            f"{self.prefix} " + fact_text(self.rng, self._tag())
            for _ in range(self.rng.randint(1, 3))
        ]
        body = {"user_id": self.user, "facts": [{"text": t} for t in texts]}
        response = self._call("record", "POST", "/v1/memories", json=body)
        if response is None or response.status_code != 200:
            return
        results = response.json()["results"]
        with self.shared.lock:
            for text, result in zip(texts, results, strict=True):
                if result["status"] != "created":
                    self.shared.errors.append(f"record: {result['status']} for a new text")
                self.shared.facts[(self.tenant, self.user)][result["id"]] = text
                self.mine.append(result["id"])

    def search(self) -> None:
        body = {
            "user_id": self.user,
            "query": sentence(self.rng, self.rng.randint(1, 4)),
            "top_k": self.rng.choice((1, 5, 20)),
            "mode": self.rng.choice(MODES),
        }
        response = self._call("search", "POST", "/v1/memories/search", json=body)
        if response is not None and response.status_code == 200:
            self._check_owned(response.json()["hits"])

    def list_page(self) -> None:
        params = {"user_id": self.user, "limit": self.rng.choice((10, 100))}
        response = self._call("list", "GET", "/v1/memories", params=params)
        if response is not None and response.status_code == 200:
            self._check_owned(response.json()["items"])

    def delete(self) -> None:
        if not self.mine:
            return
        fid = self.mine.pop(self.rng.randrange(len(self.mine)))
        response = self._call(
            "delete", "DELETE", f"/v1/memories/{fid}", params={"user_id": self.user}
        )
        if response is not None and response.status_code == 200:
            with self.shared.lock:
                self.shared.deleted.add(fid)

    def append(self) -> None:
        contents = [f"{self._tag()} {sentence(self.rng)}" for _ in range(self.rng.randint(1, 2))]
        body: dict[str, Any] = {
            "user_id": self.user,
            "messages": [{"role": "user", "content": c} for c in contents],
        }
        if self.rng.random() < 0.5:
            body["expected_version"] = self.version  # may be stale: a 409 is then correct
        url = f"/v1/sessions/{self.session}/messages"
        response = self._call("append", "POST", url, json=body)
        if response is None:
            return
        if response.status_code == 200:
            self.version = response.json()["version"]
            with self.shared.lock:
                key = (self.tenant, self.user, self.session)
                self.shared.appends[key].extend(contents)
                self.shared.versions[key] += 1
        elif response.status_code == 409:
            state = self._call(
                "session", "GET", f"/v1/sessions/{self.session}", params={"user_id": self.user}
            )
            if state is not None and state.status_code == 200:
                self.version = state.json()["version"]


def _check_final(urls: list[str], keys: dict[str, str], shared: Shared) -> dict[str, int]:
    """The state every server shows equals the acknowledged operations, exactly."""
    problems = Counter()
    for url in urls:
        for tenant, key in keys.items():
            with httpx.Client(base_url=url, headers=bearer(key), timeout=120.0) as http:
                for (t, user), recorded in shared.facts.items():
                    if t != tenant:
                        continue
                    expected = {
                        fid: text for fid, text in recorded.items() if fid not in shared.deleted
                    }
                    listed = {item["id"]: item["text"] for item in list_facts(http, user)}
                    problems["missing_facts"] += len(expected.keys() - listed.keys())
                    problems["extra_facts"] += len(listed.keys() - expected.keys())
                    problems["changed_texts"] += sum(
                        1 for fid in expected.keys() & listed.keys() if expected[fid] != listed[fid]
                    )
                for (t, user, session), contents in shared.appends.items():
                    if t != tenant:
                        continue
                    state = http.get(f"/v1/sessions/{session}", params={"user_id": user}).json()
                    stored = [m["content"] for m in state["messages"]]
                    problems["session_mismatch"] += int(Counter(stored) != Counter(contents))
                    problems["version_mismatch"] += int(
                        state["version"] != shared.versions[(t, user, session)]
                    )
    return dict(problems)


def run_concurrency(
    root: Path,
    *,
    clients: int = 16,
    ops: int = 1000,
    servers: int = 1,
    backend: str = "files",
    log=print,
) -> dict[str, Any]:
    """Run the mix and check it; returns counts (``ok`` says whether everything added up)."""
    keys = write_keys(root / "keys.json", {t: "user" for t in TENANTS})
    workspace = root / "workspace"
    processes = [
        ServerProcess(workspace, root / "keys.json", backend=backend) for _ in range(servers)
    ]
    shared = Shared()
    try:
        for process in processes:
            process.start()
        urls = [p.base_url for p in processes]
        threads = [
            Client(i, urls[i % servers], keys[TENANTS[i % 2]], TENANTS[i % 2], ops, shared)
            for i in range(clients)
        ]
        began = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - began
        problems = _check_final(urls, keys, shared)
    finally:
        for process in processes:
            process.kill()
    statuses = Counter()
    for (op, status), count in shared.statuses.items():
        statuses[f"{op}:{status}"] += count
    total = sum(shared.statuses.values())
    conflicts = sum(n for (op, s), n in shared.statuses.items() if s == 409)
    result = {
        "backend": backend,
        "servers": servers,
        "clients": clients,
        "ops_per_client": ops,
        "requests": total,
        "seconds": round(seconds, 1),
        "requests_per_s": round(total / seconds, 1) if seconds else None,
        "statuses": dict(sorted(statuses.items())),
        "expected_409": conflicts,
        "errors": len(shared.errors),
        "error_samples": shared.errors[:10],
        "foreign_reads": shared.foreign_reads,
        "facts_acknowledged": sum(len(v) for v in shared.facts.values()),
        "deletes_acknowledged": len(shared.deleted),
        "messages_acknowledged": sum(len(v) for v in shared.appends.values()),
        "final_state_problems": problems,
        "latency_ms_p50_p95": {
            op: [round(statistics.median(v), 1), round(_p95(v), 1)]
            for op, v in sorted(shared.latencies.items())
        },
    }
    result["ok"] = not (shared.errors or shared.foreign_reads or any(problems.values()))
    log(json.dumps(result, indent=2))
    return result


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--servers", type=int, choices=(1, 2), default=1)
    parser.add_argument("--backend", choices=("files", "qdrant"), default="files")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/concurrency.json"))
    args = parser.parse_args()
    if args.servers == 2 and args.backend != "files":
        parser.error("two processes share a files workspace; Qdrant Edge refuses a second one")
    with tempfile.TemporaryDirectory(prefix="concurrency-") as tmp:
        result = run_concurrency(
            Path(tmp),
            clients=args.clients,
            ops=args.ops,
            servers=args.servers,
            backend=args.backend,
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    raise SystemExit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
