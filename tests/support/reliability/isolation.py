"""Isolation, randomised: many tenants x users with overlapping words and ids; no read leaks.

Every tenant has the same user ids (``user00``...), every user the same session id, and every
fact is made of the same everyday words, so only the tenant/user filter keeps owners apart.
Each fact and message carries a unique token (``f123z``, ``m45z``) and every fact id is
derived from its owner, so any output (JSON, tool text, the prompt sent to the model) can be
checked for things that are not the caller's. Read paths: search in each mode, list (with
cursors, also another user's), get by id (mostly other owners' ids: must be 404), the memory
tools (memory_search, memory_get, session_search), session search and state, chat (the
recalled facts and the whole prompt the model received), export.

    .venv/bin/python -m tests.support.reliability.isolation [--tenants 20] [--users 20]
        [--facts 10] [--queries 10000] [--json benchmarks/results/isolation.json]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory_service.domain.context import RuntimeContext
from memory_service.pipeline.transfer import export_records
from memory_service.tools import MemoryTools
from tests.support.reliability.workload import WORDS, sentence

TOKEN = re.compile(r"\b[fmc]\d+z\b")
Owner = tuple[str, str]
COMMON_TEXTS = ("The user drinks coffee every morning", "The user likes jazz music")


@dataclass
class Tally:
    """Queries per read path, results seen, and results that were not the caller's."""

    queries: Counter = field(default_factory=Counter)
    results: Counter = field(default_factory=Counter)
    leaks: Counter = field(default_factory=Counter)
    samples: list[str] = field(default_factory=list)

    def check(self, path: str, asker: Owner, owners: Iterable[Owner | None], what: str) -> None:
        self.queries[path] += 1
        for owner in owners:
            self.results[path] += 1
            if owner != asker:
                self.leaks[path] += 1
                if len(self.samples) < 20:
                    self.samples.append(f"{path}: {asker} saw {owner}'s {what}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "queries": sum(self.queries.values()),
            "queries_by_path": dict(sorted(self.queries.items())),
            "results_by_path": dict(sorted(self.results.items())),
            "leaks": sum(self.leaks.values()),
            "leaks_by_path": dict(sorted(self.leaks.items())),
            "leak_samples": self.samples,
        }


class IsolationRun:
    """Seeds a workspace through the API, then fires random reads at every path."""

    def __init__(
        self,
        client,
        services,
        user_keys: dict[str, str],
        admin_keys: dict[str, str],
        *,
        users: int,
        seed: int = 11,
        chat: bool = True,
    ) -> None:
        self.client, self.services = client, services
        self.user_keys, self.admin_keys = user_keys, admin_keys
        self.tenants = sorted(user_keys)
        self.users = [f"user{i:02d}" for i in range(users)]
        self.rng = random.Random(seed)
        self.chat_enabled = chat
        self.owner_of_id: dict[str, Owner] = {}
        self.owner_of_token: dict[str, Owner] = {}
        self.ids_of: dict[Owner, list[str]] = {}
        self.serial = 0
        self.tools = MemoryTools(services.settings.workspace, services.longterm, services.shortterm)
        self.tally = Tally()
        self.foreign_guesses = {"get": 0, "delete": 0, "not_404": 0}

    def _auth(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.user_keys[tenant]}"}

    def _token(self, kind: str, owner: Owner) -> str:
        self.serial += 1
        token = f"{kind}{self.serial}z"
        self.owner_of_token[token] = owner
        return token

    def _owners_in(self, text: str) -> list[Owner | None]:
        return [self.owner_of_token.get(t) for t in TOKEN.findall(text)]

    # -- seeding --------------------------------------------------------------------------

    def seed(self, facts_per_user: int, *, consolidated_tenants: int | None = None) -> None:
        """Facts and session messages for every user; MEMORY.md for the users of the first
        ``consolidated_tenants`` tenants (all: None), then one more fact each, which only
        recall can bring into a chat prompt (MEMORY.md already holds the others)."""
        planned = {
            (tenant, user): [
                f"{sentence(self.rng, self.rng.randint(4, 9))} {self._token('f', (tenant, user))}"
                for _ in range(facts_per_user)
            ]
            + list(COMMON_TEXTS)  # the same text in every user: one id per owner
            for tenant in self.tenants
            for user in self.users
        }
        later = {owner: f"{sentence(self.rng, 6)} {self._token('f', owner)}" for owner in planned}
        # one big batch warms the embedding cache: the same vectors, far fewer model calls
        everything = {t for texts in planned.values() for t in texts} | set(later.values())
        self.services.embedder.embed(sorted(everything))
        for (tenant, user), texts in planned.items():
            owner = (tenant, user)
            body = {"user_id": user, "facts": [{"text": t} for t in texts]}
            response = self.client.post("/v1/memories", json=body, headers=self._auth(tenant))
            _expect(response, 200)
            results = response.json()["results"]
            if any(r["status"] != "created" for r in results):
                raise AssertionError(f"a new fact of {owner} was not created: {results}")
            ids = [r["id"] for r in results]
            self.ids_of[owner] = ids
            self.owner_of_id.update(dict.fromkeys(ids, owner))
            messages = [
                {"role": "user", "content": f"{sentence(self.rng)} {self._token('m', owner)}"}
                for _ in range(2)
            ]
            response = self.client.post(
                "/v1/sessions/s1/messages",
                json={"user_id": user, "messages": messages},
                headers=self._auth(tenant),
            )
            _expect(response, 200)
        for tenant in self.tenants[:consolidated_tenants]:  # the prompt and memory_get read it
            response = self.client.post(
                "/v1/maintenance/run",
                json={"force": True},
                headers={"Authorization": f"Bearer {self.admin_keys[tenant]}"},
            )
            _expect(response, 200)
            reports = response.json()["reports"]
            if len(reports) != len(self.users) or not all(
                (r["consolidation"] or {}).get("written") for r in reports
            ):
                raise AssertionError(f"maintenance of {tenant} did not write MEMORY.md: {reports}")
        for (tenant, user), text in later.items():
            body = {"user_id": user, "facts": [{"text": text}]}
            response = self.client.post("/v1/memories", json=body, headers=self._auth(tenant))
            _expect(response, 200)
            fid = response.json()["results"][0]["id"]
            self.ids_of[(tenant, user)].append(fid)
            self.owner_of_id[fid] = (tenant, user)

    # -- read paths -----------------------------------------------------------------------

    def _query(self) -> str:
        roll = self.rng.random()
        if roll < 0.15:  # another owner's exact fact text: the strongest lure there is
            other = self.rng.choice(list(self.ids_of))
            fact = self.services.longterm.get(RuntimeContext(*other), self.ids_of[other][:1])
            return TOKEN.sub("", fact[0].text).strip() if fact else "coffee"  # words only
        return " ".join(self.rng.sample(WORDS, self.rng.randint(1, 4)))

    def search(self, owner: Owner, mode: str) -> None:
        body = {
            "user_id": owner[1],
            "query": self._query(),
            "top_k": self.rng.choice((3, 10, 50)),
            "mode": mode,
        }
        response = self.client.post("/v1/memories/search", json=body, headers=self._auth(owner[0]))
        _expect(response, 200)
        hits = response.json()["hits"]
        self.tally.check(
            f"search_{mode}", owner, (self.owner_of_id.get(h["id"]) for h in hits), "fact"
        )

    def list_facts(self, owner: Owner) -> None:
        params: dict[str, Any] = {"user_id": owner[1], "limit": self.rng.randint(1, 10)}
        if self.rng.random() < 0.2:  # another owner's cursor must not open their facts
            other = self.rng.choice(list(self.ids_of))
            page = self.client.get(
                "/v1/memories",
                params={"user_id": other[1], "limit": 2},
                headers=self._auth(other[0]),
            )
            params["cursor"] = page.json()["next_cursor"]
        seen: list[Owner | None] = []
        for _ in range(3):
            response = self.client.get("/v1/memories", params=params, headers=self._auth(owner[0]))
            _expect(response, 200)
            body = response.json()
            seen += [self.owner_of_id.get(item["id"]) for item in body["items"]]
            if not body["next_cursor"]:
                break
            params["cursor"] = body["next_cursor"]
        self.tally.check("list", owner, seen, "fact")

    def get_by_id(self, owner: Owner) -> None:
        fid = self.rng.choice(list(self.owner_of_id))
        response = self.client.get(
            f"/v1/memories/{fid}", params={"user_id": owner[1]}, headers=self._auth(owner[0])
        )
        mine = self.owner_of_id[fid] == owner
        if not mine:
            self.foreign_guesses["get"] += 1
            self.foreign_guesses["not_404"] += int(response.status_code != 404)
        shown = [self.owner_of_id.get(response.json()["id"])] if response.status_code == 200 else []
        self.tally.check("get_by_id", owner, shown, "fact")

    def delete_guess(self, owner: Owner) -> None:
        """Deleting another owner's fact by its id: 404, and the fact is still theirs."""
        other = self.rng.choice([o for o in self.ids_of if o != owner])
        fid = self.rng.choice(self.ids_of[other])
        response = self.client.delete(
            f"/v1/memories/{fid}", params={"user_id": owner[1]}, headers=self._auth(owner[0])
        )
        self.foreign_guesses["delete"] += 1
        self.foreign_guesses["not_404"] += int(response.status_code != 404)
        still = self.client.get(
            f"/v1/memories/{fid}", params={"user_id": other[1]}, headers=self._auth(other[0])
        )
        self.foreign_guesses["not_404"] += int(still.status_code != 200)

    def memory_tools(self, owner: Owner) -> None:
        ctx = RuntimeContext(*owner, session_id="s1")
        text = self.tools.memory_search(ctx, self._query())
        ids = re.findall(r"\(id=([0-9a-f-]{36})", text)
        owners = self._owners_in(text) + [self.owner_of_id.get(i) for i in ids]
        self.tally.check("tool_memory_search", owner, owners, "memory line")
        path = self.rng.choice(self._memory_files(owner))
        text = self.tools.memory_get(ctx, path)
        self.tally.check("tool_memory_get", owner, self._owners_in(text), "memory line")
        text = self.tools.session_search(ctx, self.rng.choice(WORDS))
        self.tally.check("tool_session_search", owner, self._owners_in(text), "message")

    def _memory_files(self, owner: Owner) -> list[str]:
        folder = self.services.settings.workspace / "tenants" / owner[0] / "users" / owner[1]
        found = ["MEMORY.md"] if (folder / "MEMORY.md").is_file() else []
        return found + [f"memory/{p.name}" for p in sorted((folder / "memory").glob("*.md"))]

    def sessions(self, owner: Owner) -> None:
        body = {"user_id": owner[1], "query": " ".join(self.rng.sample(WORDS, 2)), "limit": 50}
        response = self.client.post("/v1/sessions/search", json=body, headers=self._auth(owner[0]))
        _expect(response, 200)
        owners = [o for hit in response.json()["hits"] for o in self._owners_in(hit["snippet"])]
        self.tally.check("session_search", owner, owners, "message")
        response = self.client.get(
            "/v1/sessions/s1", params={"user_id": owner[1]}, headers=self._auth(owner[0])
        )
        _expect(response, 200)
        owners = [o for m in response.json()["messages"] for o in self._owners_in(m["content"])]
        self.tally.check("session_state", owner, owners, "message")

    def chat(self, owner: Owner, prompts: Callable[[], str]) -> None:
        message = f"{self._query()} {self._token('c', owner)}"
        body = {"user_id": owner[1], "session_id": "chat", "message": message}
        response = self.client.post("/v1/chat", json=body, headers=self._auth(owner[0]))
        _expect(response, 200)
        recalled = response.json()["memory"]["recalled"]
        self.tally.check(
            "chat_recall", owner, (self.owner_of_id.get(r["id"]) for r in recalled), "fact"
        )
        self.tally.check("chat_prompt", owner, self._owners_in(prompts()), "text in the prompt")

    def export(self, tenant: str) -> None:
        self.tally.queries["export"] += 1
        for record in export_records(self.services.longterm, tenant):
            self.tally.results["export"] += 1
            owner = self.owner_of_id.get(record["id"])
            if owner is None or owner != (tenant, record["user_id"]):
                self.tally.leaks["export"] += 1
                self.tally.samples.append(f"export of {tenant}: {record['id']} of {owner}")

    def run_queries(
        self, count: int, prompts: Callable[[], str] | None, *, chat_share: float = 0.1
    ) -> None:
        paths: list[tuple[str, Callable[[Owner], None]]] = [
            ("hybrid", lambda o: self.search(o, "hybrid")),
            ("bm25", lambda o: self.search(o, "bm25")),
            ("dense", lambda o: self.search(o, "dense")),
            ("list", self.list_facts),
            ("get", self.get_by_id),
            ("get2", self.get_by_id),
            ("delete_guess", self.delete_guess),
            ("tools", self.memory_tools),
            ("sessions", self.sessions),
        ]
        owners = list(self.ids_of)
        for number in range(count):
            if number % 500 == 0:
                self.export(self.rng.choice(self.tenants))
            owner = self.rng.choice(owners)
            if self.chat_enabled and prompts is not None and self.rng.random() < chat_share:
                self.chat(owner, prompts)  # the slowest path (two model round trips)
            else:
                self.rng.choice(paths)[1](owner)


def _expect(response, status: int) -> None:
    if response.status_code != status:
        raise AssertionError(
            f"expected {status}, got {response.status_code}: {response.text[:300]}"
        )


# -- the full-size run --------------------------------------------------------------------


def run_isolation(
    workdir: Path,
    *,
    tenants: int = 20,
    users: int = 20,
    facts: int = 10,
    queries: int = 10_000,
    seed: int = 11,
    embedder=None,
    consolidated_tenants: int | None = None,
    chat_share: float = 0.1,
    log=print,
) -> dict[str, Any]:
    """Services from Settings (files backend), the in-process API, the loopback LLM."""
    from fastapi.testclient import TestClient

    from memory_service.api import create_app
    from memory_service.api.keys import ApiKeyRing
    from memory_service.config import load_settings
    from memory_service.services import build_services
    from tests.support.llm_server import LlmTestServer

    names = [f"tenant{i:02d}" for i in range(tenants)]
    user_keys = {t: f"user-key-{t}-0123456789" for t in names}
    admin_keys = {t: f"admin-key-{t}-0123456789" for t in names}
    ring = {k: {"tenant": t, "role": "user"} for t, k in user_keys.items()}
    ring |= {k: {"tenant": t, "role": "admin"} for t, k in admin_keys.items()}
    with LlmTestServer() as llm:
        llm.responder = echo_responder
        settings = load_settings(
            workspace=workdir / "ws",
            llm={"base_url": llm.base_url, "model": "chat", "context_window": 32_000},
        )
        services = build_services(settings, embedder=embedder)
        try:
            with TestClient(create_app(services, ApiKeyRing(ring))) as client:
                run = IsolationRun(client, services, user_keys, admin_keys, users=users, seed=seed)
                began = time.perf_counter()
                run.seed(facts, consolidated_tenants=consolidated_tenants)
                seeded = time.perf_counter() - began
                began = time.perf_counter()
                run.run_queries(
                    queries, lambda: llm.chat_requests[-1].prompt_text, chat_share=chat_share
                )
                queried = time.perf_counter() - began
        finally:
            services.close()
    result = {
        "tenants": tenants,
        "users_per_tenant": users,
        "facts": len(run.owner_of_id),
        "seed_s": round(seeded, 1),
        "query_s": round(queried, 1),
        **run.tally.to_dict(),
        "foreign_id_guesses": run.foreign_guesses,
    }
    result["ok"] = result["leaks"] == 0 and run.foreign_guesses["not_404"] == 0
    log(json.dumps(result, indent=2))
    return result


def echo_responder(request):
    """The loopback model: NO_REPLY to flushes, the given facts as MEMORY.md to
    consolidations, a summary to compactions, an echo of the user's message to chats."""
    from memory_service.pipeline.consolidation import DEFAULT_CONSOLIDATION_PROMPT
    from tests.support.chat_script import FLUSH_MARK, SUMMARY_MARK, SUMMARY_REPLY

    CONSOLIDATION_MARK = DEFAULT_CONSOLIDATION_PROMPT.splitlines()[0]  # noqa: N806
    from tests.support.llm_server import text

    system = next((m.get("content") or "" for m in request.messages if m["role"] == "system"), "")
    if FLUSH_MARK in system:
        return text("NO_REPLY")
    if SUMMARY_MARK in system:
        return text(SUMMARY_REPLY)
    if CONSOLIDATION_MARK in system:  # MEMORY.md: the facts it was given, one bullet each
        given = request.messages[-1].get("content") or ""
        bullets = [line for line in given.split("\n") if line.startswith("- ")]
        return text("# Memory\n\n" + "\n".join(bullets or ["- (nothing yet)"]))
    last = next(
        (m.get("content") or "" for m in reversed(request.messages) if m["role"] == "user"), ""
    )
    return text(f"noted: {last[-200:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--facts", type=int, default=10, help="unique facts per user")
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/isolation.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="isolation-") as tmp:
        result = run_isolation(
            Path(tmp),
            tenants=args.tenants,
            users=args.users,
            facts=args.facts,
            queries=args.queries,
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    raise SystemExit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
