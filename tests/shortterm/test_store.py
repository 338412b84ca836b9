"""The AgentStateStore contract: files and PostgreSQL, one suite, the same assertions.

PostgreSQL runs on 127.0.0.1:5432 here and in CI (``MEMORY_TEST_POSTGRES_DSN`` overrides);
when it is missing these tests fail, they do not skip. Each test gets its own table, dropped
afterwards.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from memory_service.config import load_settings
from memory_service.domain.agent_state import AgentState, PlanItem
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import (
    BackendUnavailableError,
    ConfigurationError,
    ConflictError,
    MemoryServiceError,
    UserErasedError,
)
from memory_service.domain.messages import Msg, ToolCall
from memory_service.stores.build import session_states
from memory_service.stores.shortterm.session_state import AgentStateStore
from memory_service.stores.shortterm.session_state.files import FilesAgentStateStore
from memory_service.stores.shortterm.session_state.postgres import PostgresAgentStateStore
from memory_service.stores.shortterm.session_state.redis import RedisAgentStateStore
from tests.support.postgres import PG_DSN, postgres_state_store
from tests.support.redis import REDIS_URL

TTL = timedelta(hours=1)

ALICE = RuntimeContext("acme", "alice", "s1")
BOB = RuntimeContext("acme", "bob", "s1")
OTHER_TENANT_ALICE = RuntimeContext("globex", "alice", "s1")


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


StoreFactory = Callable[..., AgentStateStore]


@pytest.fixture(
    params=[
        "files",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def make_store(request, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory: every store it makes shares one backing (folder, table or key prefix)."""
    made: list[AgentStateStore] = []
    if request.param == "files":

        def factory(**kw) -> AgentStateStore:
            made.append(FilesAgentStateStore(tmp_path / "ws", **kw))
            return made[-1]

    elif request.param == "redis":
        prefix = request.getfixturevalue("redis_prefix")

        def factory(**kw) -> AgentStateStore:
            made.append(RedisAgentStateStore(REDIS_URL, key_prefix=prefix, **kw))
            return made[-1]

    else:
        table = request.getfixturevalue("pg_table")

        def factory(**kw) -> AgentStateStore:
            made.append(postgres_state_store(table=table, pool_min=1, pool_max=4, **kw))
            return made[-1]

    yield factory
    for store in made:
        store.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(make_store, clock) -> AgentStateStore:
    return make_store(ttl=TTL, clock=clock)


def conversation(state: AgentState) -> AgentState:
    state.append(
        Msg.user("What's the weather in Paris?"),
        Msg.assistant(tool_calls=(ToolCall("call_1", "get_weather", '{"city":"Paris"}'),)),
        Msg.tool("call_1", "sunny, 24°C"),
        Msg.assistant("It is sunny in Paris — 24°C.", metadata={"latency_ms": 812}),
    )
    state.plan.append(PlanItem("p1", "check the weather", "done"))
    state.flags["greeted"] = True
    state.extra["last_flush_at"] = "2025-01-01T00:00:00+00:00"
    return state


def test_load_without_a_state_gives_a_new_empty_one(store):
    state = store.load(ALICE)
    assert state.version == 0
    assert state.messages == []
    assert state.session_id == "s1"
    assert state.next_seq == 0 and state.last_flushed_index == -1


def test_save_and_load_round_trip(store):
    state = conversation(store.load(ALICE))
    state.mark_flushed(1)
    store.save(state, ALICE)
    assert state.version == 1

    loaded = store.load(ALICE)
    assert loaded.version == 1
    assert loaded.to_dict() == state.to_dict()
    assert [m.seq for m in loaded.messages] == [0, 1, 2, 3]
    assert loaded.messages[1].tool_calls[0].name == "get_weather"
    assert loaded.messages[2].tool_call_id == "call_1"
    assert loaded.tool_trail[0].result_chars == len("sunny, 24°C")
    assert loaded.plan[0].status == "done"
    assert [m.seq for m in loaded.unflushed()] == [2, 3]

    loaded.append(Msg.user("thanks"))
    store.save(loaded, ALICE)
    assert loaded.version == 2
    assert len(store.load(ALICE).messages) == 5


def test_what_load_returns_is_a_copy(store):
    state = conversation(store.load(ALICE))
    store.save(state, ALICE)
    state.append(Msg.user("not saved"))
    assert len(store.load(ALICE).messages) == 4


def test_stale_version_is_a_conflict_and_changes_nothing(store):
    store.save(conversation(store.load(ALICE)), ALICE)
    first, second = store.load(ALICE), store.load(ALICE)
    first.append(Msg.user("from writer one"))
    store.save(first, ALICE)
    second.append(Msg.user("from writer two"))
    with pytest.raises(ConflictError) as caught:
        store.save(second, ALICE)
    assert caught.value.http_status == 409
    assert caught.value.code == "conflict"
    assert second.version == 1  # not bumped
    stored = store.load(ALICE)
    assert stored.version == 2
    assert stored.messages[-1].content == "from writer one"


def test_two_new_states_for_one_session_conflict(store):
    one, two = store.load(ALICE), store.load(ALICE)
    store.save(one, ALICE)
    with pytest.raises(ConflictError):
        store.save(two, ALICE)


def test_two_writers_at_once_exactly_one_wins(make_store, clock):
    """Two stores (as two processes would have), eight threads, one session."""
    stores = [make_store(clock=clock), make_store(clock=clock)]
    base = conversation(stores[0].load(ALICE))
    stores[0].save(base, ALICE)
    loaded = [stores[i % 2].load(ALICE) for i in range(8)]
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def write(i: int) -> None:
        loaded[i].append(Msg.user(f"writer {i}"))
        barrier.wait()
        try:
            stores[i % 2].save(loaded[i], ALICE)
            outcomes.append(f"won {i}")
        except ConflictError:
            outcomes.append("conflict")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    winners = [o for o in outcomes if o.startswith("won")]
    assert len(winners) == 1, outcomes
    assert outcomes.count("conflict") == 7
    stored = stores[0].load(ALICE)
    assert stored.version == 2
    assert stored.messages[-1].content == f"writer {winners[0].split()[1]}"


def test_a_deleted_and_restarted_session_refuses_the_old_writer(store):
    store.save(conversation(store.load(ALICE)), ALICE)
    stale = store.load(ALICE)  # version 1 of the first incarnation
    assert store.remove(ALICE) is True
    store.save(store.load(ALICE), ALICE)  # a new session, version 1 again
    stale.append(Msg.user("late write"))
    with pytest.raises(ConflictError):
        store.save(stale, ALICE)
    assert store.load(ALICE).messages == []


def test_same_session_id_under_other_users_and_tenants_is_another_state(store):
    for ctx, text in ((ALICE, "alice"), (BOB, "bob"), (OTHER_TENANT_ALICE, "globex alice")):
        state = store.load(ctx)
        assert state.messages == [], ctx
        state.append(Msg.user(f"I am {text}"))
        store.save(state, ctx)
    assert store.load(ALICE).messages[0].content == "I am alice"
    assert store.load(BOB).messages[0].content == "I am bob"
    assert store.load(OTHER_TENANT_ALICE).messages[0].content == "I am globex alice"
    assert store.remove(BOB) is True
    assert store.load(ALICE).version == 1
    assert store.load(OTHER_TENANT_ALICE).version == 1


def test_list_sessions_shows_the_users_own_newest_first(store, clock):
    for sid, count in (("s1", 1), ("s2", 3), ("s3", 2)):
        ctx = ALICE.with_session(sid)
        state = store.load(ctx)
        state.append(*[Msg.user(f"m{i}") for i in range(count)])
        store.save(state, ctx)
        clock.advance(timedelta(minutes=1))
    store.save(store.load(BOB.with_session("bob-only")), BOB.with_session("bob-only"))
    listed = store.list_sessions(RuntimeContext("acme", "alice"))
    assert [i.session_id for i in listed] == ["s3", "s2", "s1"]
    assert [i.message_count for i in listed] == [2, 3, 1]
    assert all(i.version == 1 for i in listed)
    assert listed[0].expires_at == listed[0].updated_at + TTL
    assert store.list_sessions(RuntimeContext("globex", "alice")) == []


def test_states_expire_after_the_ttl(store, clock):
    store.save(conversation(store.load(ALICE)), ALICE)
    store.save(store.load(BOB), BOB)
    clock.advance(timedelta(minutes=50))
    kept = store.load(BOB)
    store.save(kept, BOB)  # a save renews the TTL
    stale = store.load(ALICE)
    clock.advance(timedelta(minutes=11))

    assert store.load(ALICE).version == 0  # expired: a new empty state
    assert store.load(ALICE).messages == []
    assert [i.session_id for i in store.list_sessions(RuntimeContext("acme", "alice"))] == []
    with pytest.raises(ConflictError):
        store.save(stale, ALICE)  # loaded before it expired
    assert store.load(BOB).version == 2

    assert store.purge_expired() == 1
    assert store.purge_expired() == 0
    fresh = store.load(ALICE)
    fresh.append(Msg.user("starting over"))
    store.save(fresh, ALICE)
    assert store.load(ALICE).messages[0].content == "starting over"


def test_a_new_state_takes_over_an_expired_one_before_purge(store, clock):
    store.save(conversation(store.load(ALICE)), ALICE)
    clock.advance(TTL + timedelta(seconds=1))
    fresh = store.load(ALICE)
    store.save(fresh, ALICE)
    assert fresh.version == 1
    assert store.load(ALICE).messages == []


def test_without_ttl_nothing_expires(make_store, clock):
    store = make_store(clock=clock)
    store.save(conversation(store.load(ALICE)), ALICE)
    clock.advance(timedelta(days=3650))
    assert store.load(ALICE).version == 1
    assert store.list_sessions(ALICE)[0].expires_at is None
    assert store.purge_expired() == 0


def test_remove(store):
    assert store.remove(ALICE) is False
    store.save(conversation(store.load(ALICE)), ALICE)
    assert store.remove(ALICE) is True
    assert store.load(ALICE).version == 0
    assert store.remove(ALICE) is False


def test_a_context_without_session_is_refused(store):
    with pytest.raises(MemoryServiceError, match="session_id"):
        store.load(RuntimeContext("acme", "alice"))


# -- backend specifics ---------------------------------------------------------------------


def test_files_store_keeps_one_json_per_session_in_the_users_folder(tmp_path):
    store = FilesAgentStateStore(tmp_path)
    store.save(conversation(store.load(ALICE)), ALICE)
    path = tmp_path / "tenants/acme/users/alice/state/s1.json"
    assert path.is_file()
    assert not list(path.parent.glob("*.tmp"))  # atomic replace leaves no temp file
    path.write_text("{ torn", encoding="utf-8")
    with pytest.raises(MemoryServiceError) as caught:
        store.load(ALICE)
    assert caught.value.code == "corrupt_state"


def test_postgres_store_creates_its_table(pg_table):
    first = postgres_state_store(table=pg_table)
    second = postgres_state_store(table=pg_table)  # the table exists: fine
    first.close()
    second.close()
    with psycopg.connect(PG_DSN) as conn:
        columns = dict(
            conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = %s",
                (pg_table,),
            ).fetchall()
        )
    assert columns == {
        "tenant_id": "text",
        "user_id": "text",
        "session_id": "text",
        "version": "bigint",
        "state": "jsonb",
        "updated_at": "timestamp with time zone",
        "expires_at": "timestamp with time zone",
    }


@pytest.mark.slow  # waits out the connect timeout
def test_postgres_unreachable_is_a_clear_error(tmp_path):
    settings = load_settings(
        workspace=tmp_path,
        shortterm={"backend": "postgres"},
        state={"backend": "files"},
        postgres={"dsn": "postgresql://postgres:secret@127.0.0.1:1/test", "connect_timeout_s": 1},
    )
    with pytest.raises(ConfigurationError) as caught:
        session_states(settings)
    assert "within 1s" in caught.value.message
    assert "MEMORY_POSTGRES__DSN" in caught.value.message
    assert "127.0.0.1" in caught.value.message and "secret" not in caught.value.message


def test_the_backend_is_chosen_by_settings(tmp_path, pg_table):
    files = session_states(load_settings(workspace=tmp_path))
    assert isinstance(files, FilesAgentStateStore)
    settings = load_settings(
        workspace=tmp_path,
        shortterm={"backend": "postgres", "postgres_table": pg_table, "ttl_hours": 2},
        postgres={"dsn": PG_DSN, "pool_min": 1, "pool_max": 2},
    )
    store = session_states(settings)
    try:
        assert isinstance(store, PostgresAgentStateStore)
        assert store.ttl == timedelta(hours=2)
        store.save(store.load(ALICE), ALICE)
        assert store.load(ALICE).version == 1
    finally:
        store.close()
    with pytest.raises(ConfigurationError, match="MEMORY_POSTGRES__DSN"):
        session_states(load_settings(workspace=tmp_path, shortterm={"backend": "postgres"}))


# -- Redis: its own failure modes ------------------------------------------------------------


def test_redis_unreachable_at_start_names_the_setting_without_the_password():
    with pytest.raises(ConfigurationError) as caught:
        RedisAgentStateStore("redis://:hunter2@127.0.0.1:1/0", timeout_s=0.5)
    assert "MEMORY_REDIS__URL" in caught.value.message and "127.0.0.1:1" in caught.value.message
    assert "hunter2" not in caught.value.message


def test_the_redis_backend_is_chosen_by_settings(tmp_path, redis_prefix):
    settings = load_settings(
        workspace=tmp_path,
        shortterm={"backend": "redis"},
        redis={"url": REDIS_URL, "key_prefix": redis_prefix},
    )
    store = session_states(settings)
    try:
        assert isinstance(store, RedisAgentStateStore) and store.ttl == timedelta(hours=24)
    finally:
        store.close()
    without = load_settings(workspace=tmp_path, shortterm={"backend": "redis"})
    with pytest.raises(ConfigurationError, match="MEMORY_REDIS__URL"):
        session_states(without)


def _redis_left(prefix: str) -> list[tuple[str, str]]:
    """Every key under ``prefix`` with what it holds (a string, or a set's members)."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        left = []
        for key in client.scan_iter(f"{prefix}:*"):
            held = client.get(key) if client.type(key) == b"string" else client.smembers(key)
            left.append((key.decode(), str(held)))
        return left
    finally:
        client.close()


def test_a_redis_save_begun_before_an_erase_is_refused(redis_prefix, clock):
    store = RedisAgentStateStore(REDIS_URL, key_prefix=redis_prefix, clock=clock)
    try:
        ctx = RuntimeContext("acme", "alice", "s1")
        state = store.load(ctx)
        state.append(Msg.user("my locker code is 4711"))
        store.save(state, ctx)
        assert store.erase_user(ctx) == 1
        assert store.load(ctx).is_new and store.list_sessions(ctx) == []
        left = _redis_left(redis_prefix)  # the erase's marker, naming the user by a digest only
        assert left and not any("alice" in key or "alice" in value for key, value in left)
        late = AgentState(session_id="s1")
        late.append(Msg.user("written by a save that began before the erase"))
        clock.advance(timedelta(seconds=-5))  # its work began before the erase's marker
        with pytest.raises(UserErasedError):
            store.save(late, ctx)
        clock.advance(timedelta(seconds=10))  # a new session after the erase is the user's
        fresh = AgentState(session_id="s1")
        store.save(fresh, ctx)
        assert store.load(ctx).version == 1
    finally:
        store.close()


def test_redis_expires_a_state_itself_after_the_ttl_and_a_grace(redis_prefix):
    import redis

    store = RedisAgentStateStore(REDIS_URL, key_prefix=redis_prefix, ttl=timedelta(hours=1))
    try:
        ctx = RuntimeContext("acme", "alice", "s1")
        store.save(AgentState(session_id="s1"), ctx)
        client = redis.Redis.from_url(REDIS_URL)
        remaining_ms = client.pttl(f"{redis_prefix}:state:acme:alice:s1")
        client.close()
        assert timedelta(hours=24) < timedelta(milliseconds=remaining_ms) <= timedelta(hours=25)
    finally:
        store.close()


def test_a_negative_ttl_or_an_unknown_backend_is_refused_at_start(tmp_path):
    with pytest.raises(ConfigurationError, match="MEMORY_SHORTTERM__TTL_HOURS"):
        load_settings(workspace=tmp_path, shortterm={"ttl_hours": -1})
    with pytest.raises(ConfigurationError, match="MEMORY_SHORTTERM__BACKEND"):
        load_settings(workspace=tmp_path, shortterm={"backend": "mongodb"})


class _Proxy:
    """A TCP relay to the test Redis that can be cut: a connection lost mid-service."""

    def __init__(self) -> None:
        import socket
        import threading

        self._socket = socket
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open: list = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = self._socket.create_connection(("127.0.0.1", 6379))
            self.open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass

    def cut(self) -> None:
        self.listener.shutdown(self._socket.SHUT_RDWR)  # wakes accept(); no new connection
        self.listener.close()
        for conn in self.open:
            try:
                conn.shutdown(self._socket.SHUT_RDWR)
                conn.close()
            except OSError:
                pass


def test_a_lost_redis_connection_is_a_503_not_a_crash(redis_prefix, caplog):
    """A 503 whose message names ``MEMORY_REDIS__URL``, never the server's host or port (it
    reaches callers); the log says where Redis is."""
    proxy = _Proxy()
    store = RedisAgentStateStore(
        f"redis://127.0.0.1:{proxy.port}/0", key_prefix=redis_prefix, timeout_s=1
    )
    try:
        ctx = RuntimeContext("acme", "alice", "s1")
        store.save(AgentState(session_id="s1"), ctx)
        proxy.cut()
        with caplog.at_level("ERROR"), pytest.raises(BackendUnavailableError) as caught:
            store.load(ctx)
        said = caught.value.message
        assert "Redis" in said and "MEMORY_REDIS__URL" in said, said
        assert "127.0.0.1" not in said and str(proxy.port) not in said, said
        assert f"127.0.0.1:{proxy.port}" in caplog.text, caplog.text
    finally:
        store.close()
