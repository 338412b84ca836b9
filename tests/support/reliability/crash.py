"""Crash safety: SIGKILL a real server while clients write; nothing acknowledged may be lost.

Each cycle starts ``memory-service serve`` on the workspace, runs concurrent writers (record
batches, deletes, session appends), SIGKILLs the server at a random moment, checks every file
on disk parses, restarts the server and checks through the API that

- every acknowledged fact is there (``GET /v1/memories/{id}`` and the list),
- every acknowledged delete stuck, every acknowledged session message is in the state and the
  session log, in order,
- nothing half-written is visible: every fact and message shown is one a client sent, and a
  batch whose reply was lost in the crash is there whole or not at all.

    .venv/bin/python -m tests.support.reliability.crash [--kills 20] [--backend files|qdrant|both]
        [--postgres-dsn postgresql://...]   (sessions and replica state in PostgreSQL)
        [--writers 6] [--json benchmarks/results/crash.json]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.reliability.workload import fact_text, list_facts, sentence
from tests.support.server import ServerProcess, bearer, write_keys

TENANTS = ("acme", "globex")
USERS = ("u0", "u1", "u2")
# a bullet as the service writes it: text, then the whole metadata comment
MACHINE_BULLET = re.compile(r"^- .*\S <!-- memory (?P<json>\{.*\}) -->$")
BULLET = re.compile(r"^\s*[-*+]\s+")


@dataclass
class Truth:
    """What the clients know: sent, acknowledged (HTTP 200), and in flight when it crashed."""

    owner_of_text: dict[str, tuple[str, str]] = field(default_factory=dict)
    acked: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # id -> t, u, text
    acked_this_cycle: set[str] = field(default_factory=set)
    inflight_batches: list[tuple[str, str, list[str]]] = field(default_factory=list)
    deleted: set[str] = field(default_factory=set)
    maybe_deleted: set[str] = field(default_factory=set)  # delete in flight at the crash
    messages_sent: set[str] = field(default_factory=set)
    messages_acked: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    statuses: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class CrashReport:
    backend: str
    kills: int = 0
    writes_sent: int = 0
    acked_facts: int = 0
    acked_deletes: int = 0
    acked_messages: int = 0
    inflight_batches: int = 0
    lost_facts: int = 0
    lost_messages: int = 0
    messages_out_of_order: int = 0
    resurrected_deletes: int = 0
    foreign_or_garbled_visible: int = 0
    partial_batches: int = 0
    corrupt_records: int = 0
    torn_log_lines: int = 0
    leftover_temp_files: int = 0
    server_errors: int = 0
    unexpected_statuses: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    restart_s: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.lost_facts
            or self.lost_messages
            or self.messages_out_of_order
            or self.resurrected_deletes
            or self.foreign_or_garbled_visible
            or self.partial_batches
            or self.corrupt_records
            or self.server_errors
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        out["problems"] = self.problems[:50]
        return out


class Writer(threading.Thread):
    """One client: record batches, deletes of its own facts, appends to its own session."""

    def __init__(
        self,
        base_url: str,
        key: str,
        tenant: str,
        user: str,
        name: str,
        truth: Truth,
        stop: threading.Event,
        seed: int,
        max_ops: int,
    ) -> None:
        super().__init__(daemon=True, name=name)
        self.client = httpx.Client(base_url=base_url, headers=bearer(key), timeout=60.0)
        self.tenant, self.user, self.truth, self.stop = tenant, user, truth, stop
        self.rng = random.Random(seed)
        self.session = f"s-{name}"
        self.max_ops = max_ops
        self.serial = 0
        self.sent = 0

    def _tag(self) -> str:
        self.serial += 1
        return f"{self.name}n{self.serial}x{self.rng.randrange(16**6):06x}"

    def run(self) -> None:
        try:
            for _ in range(self.max_ops):
                if self.stop.is_set():
                    return
                roll = self.rng.random()
                self.sent += 1
                try:
                    if roll < 0.6:
                        self.op_record()
                    elif roll < 0.7:
                        self.op_delete()
                    else:
                        self.op_append()
                except httpx.TransportError:
                    return  # the server is gone: what was in flight stays unknown
        finally:
            self.client.close()

    def _count(self, status: int) -> None:
        with self.truth.lock:
            self.truth.statuses[str(status)] += 1

    def op_record(self) -> None:
        size = self.rng.choice((1, 1, 2, 3, 5, 10, 25))
        texts = [
            fact_text(self.rng, self._tag(), big=self.rng.random() < 0.03) for _ in range(size)
        ]
        with self.truth.lock:
            for text in texts:
                self.truth.owner_of_text[text] = (self.tenant, self.user)
            self.truth.inflight_batches.append((self.tenant, self.user, texts))
            entry = self.truth.inflight_batches[-1]
        body = {"user_id": self.user, "facts": [{"text": t} for t in texts]}
        response = self.client.post("/v1/memories", json=body)
        self._count(response.status_code)
        with self.truth.lock:
            self.truth.inflight_batches.remove(entry)
            if response.status_code == 200:
                for text, result in zip(texts, response.json()["results"], strict=True):
                    self.truth.acked[result["id"]] = (self.tenant, self.user, text)
                    self.truth.acked_this_cycle.add(result["id"])

    def op_delete(self) -> None:
        with self.truth.lock:
            mine = [
                fid
                for fid, (t, u, _) in self.truth.acked.items()
                if t == self.tenant
                and u == self.user
                and fid not in self.truth.deleted
                and fid not in self.truth.maybe_deleted
            ]
        if not mine:
            return
        fid = self.rng.choice(mine[-200:])
        with self.truth.lock:
            self.truth.maybe_deleted.add(fid)
        response = self.client.delete(f"/v1/memories/{fid}", params={"user_id": self.user})
        self._count(response.status_code)
        with self.truth.lock:
            self.truth.maybe_deleted.discard(fid)
            if response.status_code == 200:
                self.truth.deleted.add(fid)

    def op_append(self) -> None:
        contents = [f"{self._tag()} {sentence(self.rng)}" for _ in range(self.rng.randint(1, 3))]
        with self.truth.lock:
            self.truth.messages_sent.update(contents)
        body = {
            "user_id": self.user,
            "messages": [
                {"role": "user" if i % 2 == 0 else "assistant", "content": c}
                for i, c in enumerate(contents)
            ],
        }
        response = self.client.post(f"/v1/sessions/{self.session}/messages", json=body)
        self._count(response.status_code)
        if response.status_code == 200:
            key = (self.tenant, self.user, self.session)
            with self.truth.lock:
                self.truth.messages_acked.setdefault(key, []).extend(contents)


# -- checks ----------------------------------------------------------------------------------


def scan_files(workspace: Path, report: CrashReport) -> None:
    """With the server dead: every ledger bullet and state file must parse. A session log line
    torn by the kill is counted (readers skip it: it is not JSON) but is not a failure."""
    tenants = workspace / "tenants"
    corrupt: list[str] = []
    for ledger in [*tenants.glob("*/users/*/memory/*.md"), *tenants.glob("*/users/*/MEMORY.md")]:
        for number, line in enumerate(ledger.read_text(encoding="utf-8").split("\n"), 1):
            if not BULLET.match(line):
                continue
            meta = MACHINE_BULLET.match(line)
            try:
                ok = meta is not None and isinstance(json.loads(meta.group("json")), dict)
            except ValueError:
                ok = False
            if not ok:
                corrupt.append(f"torn ledger line {ledger}:{number}: {line[:80]!r}")
    for state in tenants.glob("*/users/*/state/*.json"):
        try:
            json.loads(state.read_text(encoding="utf-8"))["state"]["messages"]
        except (ValueError, KeyError, TypeError) as exc:
            corrupt.append(f"corrupt state {state}: {exc}")
    torn = 0
    for log in tenants.glob("*/users/*/sessions/*.log.jsonl"):
        for line in log.read_text(encoding="utf-8").split("\n"):
            try:
                if line:
                    json.loads(line)
            except ValueError:
                torn += 1
    report.corrupt_records = max(report.corrupt_records, len(corrupt))
    report.problems += [p for p in corrupt if p not in report.problems]
    report.torn_log_lines = torn
    report.leftover_temp_files = sum(1 for _ in tenants.rglob(".*.tmp"))


def _log_contents(server: ServerProcess, tenant: str, user: str, session: str) -> list[str]:
    """The session's logged message texts: from PostgreSQL with replica state there, else
    from the workspace's log file (read raw: a torn line is skipped, as the service does)."""
    env = server.env
    if env.get("MEMORY_SHORTTERM__BACKEND") == "postgres":
        from memory_service.domain.context import RuntimeContext
        from memory_service.stores.database import Database
        from memory_service.stores.shortterm.session_logs.postgres import PostgresSessionLogStore

        database = Database(
            env["MEMORY_POSTGRES__DSN"], schema=env.get("MEMORY_POSTGRES__SCHEMA_NAME")
        )
        try:
            entries = PostgresSessionLogStore(database, server.workspace).read(
                RuntimeContext(tenant, user, session)
            )
        finally:
            database.close()
        return [e.message.content for e in entries if isinstance(e.message.content, str)]
    workspace = server.workspace
    path = workspace / "tenants" / tenant / "users" / user / "sessions" / f"{session}.log.jsonl"
    out = []
    for line in path.read_text(encoding="utf-8").split("\n") if path.exists() else ():
        try:
            out.append(json.loads(line)["content"])
        except (ValueError, KeyError, TypeError):
            continue
    return out


def _in_order(acked: list[str], seen: list[str]) -> bool:
    position = {text: i for i, text in enumerate(seen)}
    indexes = [position[t] for t in acked if t in position]
    return indexes == sorted(indexes)


def verify(
    server: ServerProcess, keys: dict[str, str], truth: Truth, report: CrashReport, full: bool
) -> None:
    """After a restart: acknowledged writes are all there, nothing half-written is."""
    rng = random.Random(len(truth.acked))
    clients = {
        t: httpx.Client(base_url=server.base_url, headers=bearer(k), timeout=60.0)
        for t, k in keys.items()
    }
    try:
        live = {
            fid: v
            for fid, v in truth.acked.items()
            if fid not in truth.deleted and fid not in truth.maybe_deleted
        }
        sample = set(truth.acked_this_cycle) | set(rng.sample(sorted(live), min(100, len(live))))
        for fid in sorted(live) if full else sorted(sample & live.keys()):
            tenant, user, text = live[fid]
            got = clients[tenant].get(f"/v1/memories/{fid}", params={"user_id": user})
            if got.status_code != 200 or got.json()["text"] != text:
                report.lost_facts += 1
                report.problems.append(f"lost fact {fid} ({got.status_code})")
        visible_texts: set[str] = set()
        for tenant in TENANTS:
            for user in USERS:
                listed = list_facts(clients[tenant], user)
                ids = {item["id"] for item in listed}
                for item in listed:
                    visible_texts.add(item["text"])
                    if truth.owner_of_text.get(item["text"]) != (tenant, user):
                        report.foreign_or_garbled_visible += 1
                        report.problems.append(f"unexpected fact {item['text'][:60]!r}")
                for fid, (t, u, _) in live.items():
                    if (t, u) == (tenant, user) and fid not in ids:
                        report.lost_facts += 1
                        report.problems.append(f"acknowledged fact {fid} missing from list")
                resurrected = {f for f in truth.deleted if f in ids}
                report.resurrected_deletes += len(resurrected)
        for fid in truth.maybe_deleted:  # settle deletes whose reply the crash swallowed
            tenant, user, _ = truth.acked[fid]
            got = clients[tenant].get(f"/v1/memories/{fid}", params={"user_id": user})
            if got.status_code == 404:
                truth.deleted.add(fid)
        truth.maybe_deleted.clear()
        for _, _, texts in truth.inflight_batches:
            shown = sum(1 for t in texts if t in visible_texts)
            if 0 < shown < len(texts):
                report.partial_batches += 1
                report.problems.append(f"batch of {len(texts)} shows {shown} after the crash")
        truth.inflight_batches.clear()  # their fate is settled now
        for (tenant, user, session), acked in truth.messages_acked.items():
            state = clients[tenant].get(f"/v1/sessions/{session}", params={"user_id": user})
            contents = [m["content"] for m in state.json()["messages"]]
            logged = _log_contents(server, tenant, user, session)
            for where, seen in (("state", contents), ("log", logged)):
                missing = [c for c in acked if c not in set(seen)]
                report.lost_messages += len(missing)
                if missing:
                    report.problems.append(f"{len(missing)} messages missing from the {where}")
                if not _in_order(acked, seen):
                    report.messages_out_of_order += 1
                unknown = [c for c in seen if c not in truth.messages_sent]
                report.foreign_or_garbled_visible += len(unknown)
        truth.acked_this_cycle.clear()
    finally:
        for client in clients.values():
            client.close()


# -- the run ---------------------------------------------------------------------------------


def run_crash_test(
    root: Path,
    *,
    backend: str = "files",
    kills: int = 20,
    writers: int = 6,
    min_run_s: float = 0.2,
    max_run_s: float = 4.0,
    seed: int = 7,
    log=print,
    env: dict[str, str] | None = None,
) -> CrashReport:
    """``kills`` cycles of write -> SIGKILL -> scan -> restart -> verify on one workspace.
    ``env`` adds settings to the server's environment (e.g. sessions and replica state in
    PostgreSQL: ``MEMORY_SHORTTERM__BACKEND=postgres`` and ``MEMORY_POSTGRES__DSN``)."""
    rng = random.Random(seed)
    workspace = root / "workspace"
    keys = write_keys(root / "keys.json", {t: "user" for t in TENANTS})
    if env and env.get("MEMORY_SHORTTERM__BACKEND") == "postgres":
        keys_into_postgres(root / "keys.json", env)
    truth = Truth()
    report = CrashReport(backend)
    server = ServerProcess(workspace, root / "keys.json", backend=backend, env=dict(env or {}))
    try:
        began = time.monotonic()
        server.start()
        report.restart_s.append(round(time.monotonic() - began, 2))
        for cycle in range(kills):
            stop = threading.Event()
            threads = [
                Writer(
                    server.base_url,
                    keys[TENANTS[i % len(TENANTS)]],
                    TENANTS[i % len(TENANTS)],
                    USERS[i % len(USERS)],
                    f"c{cycle}w{i}",
                    truth,
                    stop,
                    rng.randrange(2**32),
                    max_ops=10_000,
                )
                for i in range(writers)
            ]
            acked_before = len(truth.acked), _acked_messages(truth)
            for thread in threads:
                thread.start()
            _wait_for_acks(truth, *acked_before, timeout_s=60.0)  # writes under way, then
            time.sleep(rng.uniform(min_run_s, max_run_s))  # a random moment
            server.kill()
            stop.set()
            for thread in threads:
                thread.join(timeout=120)
            report.kills += 1
            report.inflight_batches += len(truth.inflight_batches)
            report.writes_sent += sum(t.sent for t in threads)
            scan_files(workspace, report)
            began = time.monotonic()
            server = ServerProcess(
                workspace, root / "keys.json", backend=backend, env=dict(env or {})
            )
            server.start()
            report.restart_s.append(round(time.monotonic() - began, 2))
            verify(server, keys, truth, report, full=cycle == kills - 1)
            if log is not None:
                log(
                    f"[{backend}] kill {cycle + 1}/{kills}: {len(truth.acked)} facts acknowledged, "
                    f"lost {report.lost_facts}, partial {report.partial_batches}, "
                    f"garbled {report.foreign_or_garbled_visible}"
                )
    finally:
        server.kill()
    report.acked_facts = len(truth.acked)
    report.acked_deletes = len(truth.deleted)
    report.acked_messages = _acked_messages(truth)
    report.server_errors = sum(n for s, n in truth.statuses.items() if s.startswith("5"))
    report.unexpected_statuses = {s: n for s, n in truth.statuses.items() if s != "200"}
    return report


def keys_into_postgres(keys_file: Path, env: dict[str, str]) -> None:
    """With replica state in PostgreSQL the keys live there: import the file's once (as
    ``memory-service keys migrate`` does)."""
    from memory_service.stores.api_keys.postgres import PostgresKeyStore
    from memory_service.stores.database import Database

    database = Database(env["MEMORY_POSTGRES__DSN"], schema=env.get("MEMORY_POSTGRES__SCHEMA_NAME"))
    try:
        PostgresKeyStore(database, keys_file=keys_file).migrate()
    finally:
        database.close()


def _acked_messages(truth: Truth) -> int:
    with truth.lock:
        return sum(len(v) for v in truth.messages_acked.values())


def _wait_for_acks(truth: Truth, facts: int, messages: int, timeout_s: float) -> None:
    """Until both kinds of write have been acknowledged this cycle (a record takes ~0.5 s on
    a loaded 2-core host, so a short run could otherwise end before any append did)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (
        len(truth.acked) <= facts or _acked_messages(truth) <= messages
    ):
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--backend", choices=("files", "qdrant", "both"), default="both")
    parser.add_argument("--writers", type=int, default=6)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/crash.json"))
    parser.add_argument(
        "--postgres-dsn",
        help="sessions and the rest of the replica state in this PostgreSQL (a replica's shape)",
    )
    args = parser.parse_args()
    env = (
        {"MEMORY_SHORTTERM__BACKEND": "postgres", "MEMORY_POSTGRES__DSN": args.postgres_dsn}
        if args.postgres_dsn
        else None
    )
    backends = ("files", "qdrant") if args.backend == "both" else (args.backend,)
    reports = []
    for backend in backends:
        with tempfile.TemporaryDirectory(prefix=f"crash-{backend}-") as tmp:
            reports.append(
                run_crash_test(
                    Path(tmp),
                    backend=backend,
                    kills=args.kills,
                    writers=args.writers,
                    seed=args.seed,
                    env=env,
                )
            )
    print(json.dumps([r.to_dict() for r in reports], indent=2))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps([r.to_dict() for r in reports], indent=2), encoding="utf-8")
    raise SystemExit(0 if all(r.ok for r in reports) else 1)


if __name__ == "__main__":
    main()
