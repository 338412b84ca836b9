"""A LangGraph ``BaseStore`` over this project's long-term memory, in-process or over HTTP.

``MemoryServiceStore.in_process(services.longterm, tenant)`` or
``MemoryServiceStore.over_http(client)`` (tenant: the client's API key) is a store a graph
compiles with (``graph.compile(store=...)``) or LangMem's memory tools use. What maps to what:

- **namespace -> tenant / user / key.** The tenant is the store's. The label at position
  ``user_at`` (default 1: LangMem's ``("memories", "{user_id}")``) is the user: the label
  itself where it is a valid user id (so erasing the user erases their items), else an id
  derived from it (``user_id``), so any label LangGraph accepts works and matches literally
  (``%``, ``*``, ``_`` included). The other labels and the item's key make the fact's ``key``
  (``langgraph:`` and the JSON array of them), so a second ``put`` of a key supersedes the
  first as any keyed fact does. Each prefix of those other labels is also a tag (a digest of
  it), which is how a prefix ``search`` is narrowed inside every retriever before top-k. A
  namespace too short to hold the user, or deeper than ``MAX_DEPTH``, raises
  ``InvalidNamespaceError``; a search prefix too short to name the user (``()`` included)
  reads every user the store can list (the key's tenant; a personal key's own user), each
  hit's namespace saying whose.
- **value -> texts.** What is searched are the texts at the paths indexed (``index=None``:
  the store's ``fields``, default ``["$"]``: the whole value as JSON; ``index=[paths]``: those
  paths alone; ``index=False``: nothing). The item's fact holds the first, then, as its data
  tail (``facts.DATA_TAIL``: kept, neither embedded nor indexed), the item as compact JSON,
  which ``get`` and ``search`` read the value back from: any JSON object round-trips exactly,
  and two items with equal values stay two facts. Each further text is a fact of its own
  (``FIELD_TAG``, keyed by the item's key and its number, the item's address in its tail),
  so every text has a vector of its own, as LangGraph's stores embed each field apart: an
  item is found by any of its fields as well as by one alone. A put with fewer texts, or a
  delete, removes the facts of the texts gone; their expiry is the item's. An
  ``index=False`` item is tagged ``langgraph-unindexed``, the others ``langgraph-indexed``;
  a ``query`` recalls the indexed ones only (the tag is inside every leg), and unindexed
  items follow them, score None, as LangGraph's own stores do. A value that is no JSON
  object, or whose fact would pass the fact size limit, is refused before anything of the
  batch is written.
- **query -> hybrid recall.** ``search(query=...)`` is the project's ``retrieve`` (the user
  scope, no threshold): the items come in the fusion's order of their best-ranked text, and
  ``SearchItem.score`` is the best dense cosine of the item's texts to the query (-1..1,
  comparable across queries and users; 0.0 for a hit the dense leg did not reach), so a
  lexical match may rank above a higher cosine. The cosine is the store's embedding model's
  (one per store); a store built with LangGraph's ``index`` config (``embed``, and
  ``distance_type``: cosine, inner_product or l2) scores in that embedding instead, as
  PostgresStore does (``langgraph_scores``), the order still the fusion's.
  Across several users, hits are merged by that cosine. ``filter`` (equality, nested
  objects, dotted paths such as ``"user.access-level"``, ``$eq $ne $gt $gte $lt $lte``) is
  applied to the recalled values, so a filtered query ranks the first ``MAX_TOP_K`` items of
  the prefix. Without a query, items come newest first.
- **time.** ``Item.updated_at`` is the current fact's ``created_at``, ``Item.created_at`` the
  first put's (a tag). ``ttl`` (minutes) is the fact's ``expires_at``, which every read hides
  once past; ``refresh_ttl`` moves it on from each ``get`` and ``search`` that returns it.
- ``list_namespaces`` reads every user of the tenant, in-process or over HTTP (``GET
  /v1/users``: a personal key's own user alone), unless its ``prefix`` names the user.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        get_text_at_path,
    )
except ImportError as exc:  # LangGraph is an optional extra
    raise ImportError(
        "memory_service.integrations.langgraph needs LangGraph: "
        "pip install 'memory-service[langgraph]'"
    ) from exc

from memory_service.client.sync_client import MemoryClient
from memory_service.domain.context import validate_id
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.facts import DATA_TAIL, Fact, parse_time, searchable, utcnow
from memory_service.domain.limits import MAX_KEY_CHARS, MAX_TAGS, MAX_TOP_K
from memory_service.integrations.langgraph_facts import ClientFacts, LocalFacts, UserFacts
from memory_service.integrations.langgraph_scores import CallerScores
from memory_service.longterm.protocol import LongTermMemory

ROOT_TAG = "langgraph"  # every item of the store
INDEXED_TAG = "langgraph-indexed"  # an item whose fields are searched
UNINDEXED_TAG = "langgraph-unindexed"  # one put with index=False: never searched
FIELD_TAG = "langgraph-field"  # one more indexed text of an item (its second, third, ...)
NS_TAG = "langgraph-ns:"  # + a digest of one prefix of the namespace's other labels
CREATED_TAG = "langgraph-created:"  # + the first put's time
TTL_TAG = "langgraph-ttl:"  # + the item's ttl in minutes
KEY_PREFIX = "langgraph:"
FIELD_KEY_PREFIX = "langgraph-field:"  # + the JSON array of the labels, the key, the text's number
MAPPED_USER = "lg-"  # + a digest of a user label that is no valid user id
MAX_DEPTH = MAX_TAGS - 4  # labels besides the user's: one tag each, beside the four above
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


@dataclass(frozen=True, slots=True)
class Address:
    """Where an item lives: its user (``user_id`` of the ``label`` at the user position) and
    the namespace's other labels. A search prefix too short to name the user has neither:
    it reads every user the store may list, ``rest`` being a prefix of their other labels."""

    user: str | None
    rest: tuple[str, ...]
    label: str | None = None

    def namespace(self, user_at: int) -> tuple[str, ...]:
        return (*self.rest[:user_at], self.label or self.user or "", *self.rest[user_at:])


def user_id(label: str) -> str:
    """The user id a namespace label stands for: the label itself where it is a valid id (so
    erasing that user erases their items), else ``MAPPED_USER`` and a digest of it, which no
    other label shares; the label stays what matching compares."""
    try:
        return validate_id(label, "user id")
    except InvalidInputError:
        return MAPPED_USER + hashlib.sha256(label.encode()).hexdigest()[:40]


class MemoryServiceStore(BaseStore):
    """LangGraph's store over long-term memory; see the module for the mapping."""

    supports_ttl = True

    def __init__(
        self,
        facts: UserFacts,
        *,
        user_at: int = 1,
        fields: Sequence[str] = ("$",),
        ttl: TTLConfig | None = None,
        index: IndexConfig | None = None,
    ) -> None:
        """``index`` is LangGraph's config: its ``fields`` (SqliteStore's ``text_fields``) are
        the fields searched, and its ``embed`` (with ``distance_type``) gives each hit's
        score; ``dims`` is the caller model's, not the store's, and is not needed."""
        if user_at < 0:
            raise ValueError("user_at is a position from the namespace's start (0 or more)")
        self.facts = facts
        self.user_at = user_at
        config: Mapping[str, Any] = index or {}  # SqliteStore's config names them text_fields
        self.fields = list(config.get("fields") or config.get("text_fields") or fields)
        self.ttl_config = ttl
        self.index_config = index
        self.scores = (
            CallerScores(index["embed"], index.get("distance_type", "cosine"))
            if index and index.get("embed") is not None
            else None
        )

    @classmethod
    def in_process(
        cls, memory: LongTermMemory, tenant_id: str, **options: Any
    ) -> MemoryServiceStore:
        """Over ``memory`` (``services.longterm``) for ``tenant_id``."""
        return cls(LocalFacts(memory, validate_id(tenant_id, "tenant id")), **options)

    @classmethod
    def over_http(cls, client: MemoryClient, **options: Any) -> MemoryServiceStore:
        """Over the server ``client`` talks to, for its API key's tenant."""
        return cls(ClientFacts(client), **options)

    # -- the batch ---------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Every op checked (and every put's fact built) first, then run in order: one bad op
        raises and nothing of the batch is written."""
        ops = list(ops)
        planned = [self._plan(op) for op in ops]
        return [self._run(op, plan) for op, plan in zip(ops, planned, strict=True)]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _plan(self, op: Op) -> Any:
        if isinstance(op, GetOp):
            return self._address(op.namespace)
        if isinstance(op, PutOp):
            address = self._address(op.namespace)
            if op.value is None:
                return address
            return address, self._facts(address, op)
        if isinstance(op, SearchOp):
            _check_filter(op.filter)
            return self._address(op.namespace_prefix, prefix=True)
        if isinstance(op, ListNamespacesOp):
            return self._listing_users(op)
        raise ValueError(f"unknown store operation {type(op).__name__}")

    def _run(self, op: Op, plan: Any) -> Result:
        if isinstance(op, GetOp):
            return self._get(plan, op.key, op.refresh_ttl)
        if isinstance(op, PutOp):
            if op.value is None:
                self._delete(plan, op.key)
            else:
                self._put(*plan)
            return None
        if isinstance(op, SearchOp):
            return self._search(plan, op)
        return self._namespaces(plan, op)  # type: ignore[arg-type]

    # -- addresses ---------------------------------------------------------------------------

    def _address(self, namespace: tuple[str, ...], *, prefix: bool = False) -> Address:
        labels = tuple(namespace)
        for label in labels:
            if not isinstance(label, str) or not label or "." in label or "\x00" in label:
                raise InvalidNamespaceError(
                    f"namespace labels must be non-empty text without '.' or NUL: {labels}"
                )
        if len(labels) <= self.user_at:
            if prefix:
                return Address(None, labels)  # every user's, under these first labels
            raise InvalidNamespaceError(
                f"a namespace needs the user at position {self.user_at}: {labels} has none"
            )
        label = labels[self.user_at]
        rest = labels[: self.user_at] + labels[self.user_at + 1 :]
        if len(rest) > MAX_DEPTH:
            raise InvalidNamespaceError(
                f"a namespace holds at most {MAX_DEPTH} labels besides the user's: {labels}"
            )
        return Address(user_id(label), rest, label)

    def _users(self, address: Address, what: str) -> list[str]:
        """The users ``address`` reads: its own, or every user the store may list."""
        if address.user is not None:
            return [address.user]
        users = self.facts.users()
        if users is None:
            raise InvalidNamespaceError(
                f"{what} needs a prefix naming the user (position {self.user_at}): "
                "this memory lists no users"
            )
        return users

    def _fact_key(self, address: Address, key: str, text: int = 0) -> str:
        """The key of the item's fact (``text`` 0) or of the fact of its ``text``-th indexed
        text (1 on: ``FIELD_KEY_PREFIX``)."""
        if text:
            fact_key = FIELD_KEY_PREFIX + _dump([*address.rest, key, text])
        else:
            fact_key = KEY_PREFIX + _dump([*address.rest, key])
        if len(fact_key) > MAX_KEY_CHARS:
            raise InvalidInputError(
                f"namespace and key {key!r} are too long together: their fact key would be "
                f"{len(fact_key)} characters, over {MAX_KEY_CHARS}"
            )
        return fact_key

    # -- put, get, delete --------------------------------------------------------------------

    def _facts(self, address: Address, op: PutOp) -> list[Fact]:
        """The item's fact (its first indexed text, the item in its data tail), then one fact
        per further indexed text, each embedded alone as LangGraph embeds each field."""
        if not isinstance(op.value, Mapping) or not all(isinstance(k, str) for k in op.value):
            raise InvalidInputError("a store value must be a mapping with string keys")
        value = dict(op.value)
        stored = {"namespace": list(address.rest), "user": address.label}
        try:
            _dump(value)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"a store value must be JSON: {exc}") from None
        texts = [] if op.index is False else self._indexed(value, op.index)
        record = _dump({**stored, "key": op.key, "value": value, "texts": len(texts)})
        tags = [ROOT_TAG, *_ns_tags(address.rest)]
        field_tags = (*tags, INDEXED_TAG, FIELD_TAG)
        tags.append(UNINDEXED_TAG if op.index is False else INDEXED_TAG)
        expires_at = None
        if op.ttl is not None:
            if isinstance(op.ttl, bool) or not isinstance(op.ttl, int | float):
                raise InvalidInputError("ttl is a number of minutes")
            if not math.isfinite(op.ttl) or op.ttl <= 0:
                raise InvalidInputError(f"ttl must be a positive number of minutes: {op.ttl}")
            tags.append(f"{TTL_TAG}{op.ttl!r}")
            expires_at = utcnow() + timedelta(minutes=op.ttl)
        item = Fact(
            text=(texts[0] if texts else "") + DATA_TAIL + record,
            key=self._fact_key(address, op.key),
            tags=tuple(tags),
            expires_at=expires_at,
        )
        fields = [
            Fact(
                text=text + DATA_TAIL + _dump({**stored, "key": op.key, "text": n}),
                key=self._fact_key(address, op.key, n),
                tags=field_tags,
                expires_at=expires_at,
            )
            for n, text in enumerate(texts[1:], start=1)
        ]
        return [f.validate() for f in (item, *fields)]

    def _indexed(self, value: dict[str, Any], index: list[str] | None) -> list[str]:
        """The texts at the paths indexed, as LangGraph's stores take them (``$``: the whole
        value as JSON with sorted keys), blanks folded."""
        paths = self.fields if index is None else list(index)
        texts: list[str] = []
        for path in paths:
            texts += [t for t in get_text_at_path(value, path) if t.strip()]
        return [" ".join(t.split()) for t in texts]

    def _put(self, address: Address, facts: list[Fact]) -> None:
        """The item's facts in one write (each text's fact superseding the one of its key),
        then the facts of texts the item no longer has deleted."""
        fact, *fields = facts
        current = self._current(address, fact.key or "")
        created = _created(current) if current is not None else utcnow()
        tagged = Fact(
            text=fact.text,
            key=fact.key,
            tags=(*fact.tags, CREATED_TAG + created.isoformat()),
            expires_at=fact.expires_at,
        )
        statuses = self.facts.record(address.user, [tagged, *fields])
        if fact.expires_at is not None:  # a text put again unchanged keeps its fact: move it
            for status, put in zip(statuses, [tagged, *fields], strict=True):
                was = current if put is tagged else self._current(address, put.key or "")
                if status == "duplicate" and was is not None:
                    self.facts.expire_at(address.user, was, fact.expires_at)
        if current is not None:
            key = _record(current)["key"]
            gone = range(len(fields) + 1, _texts(current))
            self._drop(address, [self._fact_key(address, key, n) for n in gone])

    def _drop(self, address: Address, fact_keys: Sequence[str]) -> None:
        """Delete every fact (closed ones too) of ``fact_keys``."""
        ids = [
            f.id
            for fact_key in fact_keys
            for f in self.facts.listing(
                address.user, tags_all=(ROOT_TAG,), key=fact_key, inactive=True
            )
        ]
        self.facts.delete(address.user, ids)

    def _current(self, address: Address, fact_key: str) -> Fact | None:
        found = self.facts.listing(address.user, tags_all=(ROOT_TAG,), key=fact_key)
        return max(found, key=_updated, default=None)

    def _get(self, address: Address, key: str, refresh: bool) -> Item | None:
        fact = self._current(address, self._fact_key(address, key))
        if fact is None:
            return None
        if refresh:
            self._refresh(address.user, [fact])
        item = self._item(address.user, fact)
        return Item(
            value=item.value,
            key=item.key,
            namespace=item.namespace,
            created_at=item.created_at,
            updated_at=item.updated_at,
        )

    def _delete(self, address: Address, key: str) -> None:
        fact_key = self._fact_key(address, key)
        every = self.facts.listing(address.user, tags_all=(ROOT_TAG,), key=fact_key, inactive=True)
        self.facts.delete(address.user, [f.id for f in every])
        texts = max((_texts(f) for f in every), default=0)
        self._drop(address, [self._fact_key(address, key, n) for n in range(1, texts)])

    def _refresh(self, user: str, facts: Sequence[Fact]) -> None:
        """Move each item's expiry on, and its further texts' facts with it."""
        now = utcnow()
        for fact in facts:
            minutes = _ttl(fact)
            if minutes is None:
                continue
            expires_at = now + timedelta(minutes=minutes)
            self.facts.expire_at(user, fact, expires_at)
            record = _record(fact)
            address = Address(user, tuple(record["namespace"]), record.get("user"))
            for n in range(1, _texts(fact)):
                field = self._current(address, self._fact_key(address, record["key"], n))
                if field is not None:
                    self.facts.expire_at(user, field, expires_at)

    # -- search ------------------------------------------------------------------------------

    def _search(self, address: Address, op: SearchOp) -> list[SearchItem]:
        tag = _ns_tags(address.rest)[-1] if address.rest else ROOT_TAG
        users = self._users(address, "search")
        offset, limit = max(op.offset, 0), max(op.limit, 0)
        page: list[tuple[str, Fact, float | None]]
        if op.query:
            depth = MAX_TOP_K if op.filter else min(MAX_TOP_K, offset + limit)
            scored = [
                (user, fact, score)
                for user in users
                for fact, score in self._recall(user, op.query, max(depth, 1), tag)
            ]
            if len(users) > 1:  # each user's recall is ranked apart: their cosines compare
                scored.sort(key=lambda hit: -hit[2])
            kept = [h for h in scored if _matches(self._value(h[1]), op.filter)]
            page = list(kept[offset : offset + limit])
            if len(page) < limit:
                seen = {f.id for _, f, _ in scored}
                rest = [
                    (user, f, None)
                    for user, f in self._listed(users, tag, op.filter)
                    if UNINDEXED_TAG in f.tags and f.id not in seen
                ]
                skip = max(offset - len(kept), 0)
                page += rest[skip : skip + limit - len(page)]
        else:
            listed = self._listed(users, tag, op.filter)
            page = [(user, f, None) for user, f in listed[offset : offset + limit]]
        if op.refresh_ttl:
            for user in {user for user, _, _ in page}:
                self._refresh(user, [f for u, f, _ in page if u == user])
        return [self._item(user, f, score) for user, f, score in page]

    def _recall(self, user: str, query: str, want: int, tag: str) -> list[tuple[Fact, float]]:
        """The prefix's best ``want`` (or more) indexed items, in the fusion's order of their
        best-ranked text, each with the best dense cosine of its texts to ``query``, as
        LangGraph scores an item indexed on several fields. An item's texts may take several
        places of a recall: it is asked deeper until ``want`` items come, or no more do."""
        depth = max(want, 1)
        while True:
            hits = self._hits(user, query, depth, tag)
            items = self._items_of(user, hits)
            if len(items) >= want or len(hits) < depth or depth >= MAX_TOP_K:
                break
            depth = min(MAX_TOP_K, depth * 2)
        if self.scores is None:
            return [(item, cosine) for item, cosine, _ in items]
        groups = [self._item_texts(user, item, seen) for item, _, seen in items]
        scores = self.scores.best(query, groups)
        return [(item, score) for (item, _, _), score in zip(items, scores, strict=True)]

    def _items_of(
        self, user: str, hits: list[tuple[Fact, float]]
    ) -> list[tuple[Fact, float, dict[int, str]]]:
        """The items ``hits`` are texts of, in the order of each one's first hit, with its
        best cosine and the texts of it that were hit (by number); an item found by a
        further text alone is read by its key."""
        found: dict[str, tuple[Fact | None, float, Address, dict[int, str]]] = {}
        for fact, cosine in hits:
            record = _record(fact)
            item_key = KEY_PREFIX + _dump([*record["namespace"], record["key"]])
            item = None if FIELD_TAG in fact.tags else fact
            had = found.get(item_key)
            seen = had[3] if had is not None else {}
            seen[int(record.get("text", 0))] = searchable(fact.text)
            if had is not None:
                item, cosine = had[0] or item, max(had[1], cosine)
            address = Address(user, tuple(record["namespace"]), record.get("user"))
            found[item_key] = (item, cosine, address, seen)
        items = []
        for item_key, (item, cosine, address, seen) in found.items():
            if item is None:
                item = self._current(address, item_key)
                if item is not None:
                    seen[0] = searchable(item.text)
            if item is not None and INDEXED_TAG in item.tags:
                items.append((item, cosine, seen))
        return items

    def _item_texts(self, user: str, item: Fact, seen: dict[int, str]) -> list[str]:
        """Every indexed text of ``item``: those the recall brought, the others read by key."""
        record = _record(item)
        address = Address(user, tuple(record["namespace"]), record.get("user"))
        texts = []
        for n in range(_texts(item)):
            if n not in seen:
                field = self._current(address, self._fact_key(address, record["key"], n))
                if field is None:
                    continue
                seen[n] = searchable(field.text)
            texts.append(seen[n])
        return texts

    def _hits(self, user: str, query: str, depth: int, tag: str) -> list[tuple[Fact, float]]:
        """The prefix's best ``depth`` indexed texts, in the fusion's order, each with its
        dense cosine to ``query`` (0.0 where the dense leg did not reach it). Asked unfiltered
        first: when every hit is an indexed item of the prefix, that ranking stands (for a
        user whose items are all indexed and under the prefix, the filtered recall's exactly)
        without the files backend's filter pass, which made a search slower than the plain
        recall (``benchmarks/RESULTS.md``, "LangGraph store"); otherwise it is asked again with
        the prefix's and the indexed items' tags inside every leg, so nothing else takes a place
        in the top k."""
        hits = self.facts.recall(user, query, depth, ())
        if not all(tag in f.tags and UNINDEXED_TAG not in f.tags for f, _ in hits):
            hits = self.facts.recall(user, query, depth, (tag, INDEXED_TAG))
        return [(fact, 0.0 if cosine is None else cosine) for fact, cosine in hits]

    def _listed(
        self, users: Sequence[str], tag: str, flt: dict[str, Any] | None
    ) -> list[tuple[str, Fact]]:
        """The prefix's items that pass ``flt``, each with its user, newest first."""
        kept = [
            (user, f)
            for user in users
            for f in self.facts.listing(user, tags_all=(tag,), key=None)
            if FIELD_TAG not in f.tags and _matches(self._value(f), flt)
        ]
        return sorted(kept, key=lambda hit: _updated(hit[1]), reverse=True)

    # -- namespaces --------------------------------------------------------------------------

    def _listing_users(self, op: ListNamespacesOp) -> list[str]:
        for condition in op.match_conditions or ():
            for label in condition.path:
                if not isinstance(label, str) or not label or "." in label:
                    raise InvalidNamespaceError(f"invalid namespace label {label!r}")
        at = self.user_at
        named = {
            user_id(c.path[at])
            for c in op.match_conditions or ()
            if c.match_type == "prefix" and len(c.path) > at and c.path[at] != "*"
        }
        if named:
            user = named.pop()
            return [user] if not named else []
        users = self.facts.users()
        if users is None:
            raise InvalidNamespaceError(
                f"list_namespaces needs a prefix naming the user (position {self.user_at}): "
                "this memory lists no users"
            )
        return users

    def _namespaces(self, users: list[str], op: ListNamespacesOp) -> list[tuple[str, ...]]:
        found: set[tuple[str, ...]] = set()
        for user in users:
            for fact in self.facts.listing(user, tags_all=(ROOT_TAG,), key=None):
                if FIELD_TAG not in fact.tags:
                    found.add(self._item(user, fact).namespace)
        matching = [ns for ns in found if all(_fits(c, ns) for c in op.match_conditions or ())]
        if op.max_depth is not None:
            matching = list({ns[: op.max_depth] for ns in matching})
        return sorted(matching)[op.offset : op.offset + op.limit]

    # -- facts back into items ---------------------------------------------------------------

    def _value(self, fact: Fact) -> dict[str, Any]:
        return _record(fact)["value"]

    def _item(self, user: str, fact: Fact, score: float | None = None) -> SearchItem:
        record = _record(fact)
        address = Address(user, tuple(record["namespace"]), record.get("user"))
        return SearchItem(
            namespace=address.namespace(self.user_at),
            key=record["key"],
            value=record["value"],
            created_at=_created(fact),
            updated_at=_updated(fact),
            score=score,
        )


def _dump(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _record(fact: Fact) -> dict[str, Any]:
    """The item a fact keeps in its data tail (or, written before there was one, last line)."""
    return json.loads(fact.text.rsplit("\n", 1)[-1].lstrip(DATA_TAIL[-1]))


def _texts(fact: Fact) -> int:
    """How many indexed texts the item ``fact`` holds has (each past the first: a fact)."""
    return int(_record(fact).get("texts", 1))


def _ns_tags(rest: tuple[str, ...]) -> list[str]:
    """One tag per prefix of the labels (a digest: labels may be longer than a tag)."""
    return [
        NS_TAG + hashlib.sha256(_dump(list(rest[:n])).encode()).hexdigest()[:32]
        for n in range(1, len(rest) + 1)
    ]


def _updated(fact: Fact) -> datetime:
    return fact.created_at or datetime.min.replace(tzinfo=UTC)


def _created(fact: Fact) -> datetime:
    for tag in fact.tags:
        if tag.startswith(CREATED_TAG):
            found = parse_time(tag[len(CREATED_TAG) :], "created_at")
            if found is not None:
                return found
    return _updated(fact)


def _ttl(fact: Fact) -> float | None:
    for tag in fact.tags:
        if tag.startswith(TTL_TAG):
            return float(tag[len(TTL_TAG) :])
    return None


def _fits(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        part = namespace[: len(path)]
    elif condition.match_type == "suffix":
        part = namespace[len(namespace) - len(path) :]
    else:
        raise ValueError(f"unknown match type {condition.match_type!r}")
    return all(want in ("*", have) for want, have in zip(path, part, strict=True))


def _check_filter(flt: dict[str, Any] | None) -> None:
    """Refuse an operator LangGraph does not define before anything runs."""

    def walk(node: object) -> None:
        if isinstance(node, Mapping):
            for name, inner in node.items():
                if isinstance(name, str) and name.startswith("$") and name not in OPERATORS:
                    raise InvalidInputError(
                        f"unknown filter operator {name!r}: use one of {', '.join(OPERATORS)}"
                    )
                walk(inner)

    walk(flt or {})


def _matches(value: Any, flt: Mapping[str, Any] | None) -> bool:
    return all(_meets(_at(value, name), want) for name, want in (flt or {}).items())


def _at(value: Mapping[str, Any], name: str) -> Any:
    """The value a filter key names: the field of that name, else a dotted path into nested
    objects (``"user.access-level"``), as LangGraph's SQLite and Postgres stores read it."""
    if name in value or "." not in name:
        return value.get(name)
    node: Any = value
    for part in name.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _meets(have: Any, want: Any) -> bool:
    """LangGraph's filter rule: equality (objects field by field, lists element by element),
    or each ``$`` operator of an object."""
    if isinstance(want, Mapping):
        if any(str(k).startswith("$") for k in want):
            return all(_compare(have, op, arg) for op, arg in want.items())
        return isinstance(have, Mapping) and all(_meets(have.get(k), v) for k, v in want.items())
    if isinstance(want, list | tuple):
        return (
            isinstance(have, list | tuple)
            and len(have) == len(want)
            and all(_meets(h, w) for h, w in zip(have, want, strict=True))
        )
    return have == want


def _compare(have: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return have == arg
    if op == "$ne":
        return have != arg
    try:
        left, right = float(have), float(arg)
    except (TypeError, ValueError):
        return False  # an absent or non-numeric field is not ordered
    return {
        "$gt": left > right,
        "$gte": left >= right,
        "$lt": left < right,
        "$lte": left <= right,
    }[op]
