"""Mixed record and search load through ``AsyncMemoryClient``, and the check that every write
the service acknowledged can be read back: what the several-process tests and
``benchmarks/latency/processes.py`` share.

Each client is one ``AsyncMemoryClient`` (one kept-alive connection) asking as fast as it is
answered, without retries: every error is counted, and a write counts as acknowledged only
when its answer came back. Each recorded text is new (a counter and random words), so a lost
write cannot hide behind an earlier identical one.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

WORDS = (
    "amber",
    "basil",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lantern",
    "meadow",
    "nutmeg",
    "orchid",
    "pepper",
    "quartz",
    "raven",
    "saffron",
    "thistle",
    "umber",
    "violet",
    "willow",
    "yarrow",
    "zephyr",
)
QUESTIONS = (
    "what does the user keep in the {w} box?",
    "which {w} did the user note?",
    "where is the {w} kept?",
)


@dataclass
class Written:
    """One acknowledged write: whose, what, and the id the answer gave."""

    user: str
    text: str
    fact_id: str


@dataclass
class LoadResult:
    seconds: float = 0.0
    search_ms: list[float] = field(default_factory=list)
    record_ms: list[float] = field(default_factory=list)
    written: list[Written] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    answered_at: list[float] = field(default_factory=list)  # time.monotonic() of each answer

    @property
    def answered(self) -> int:
        return len(self.search_ms) + len(self.record_ms)


def user_name(index: int) -> str:
    return f"load-{index}"


async def mixed_load(
    base_url: str,
    key: str,
    *,
    clients: int,
    seconds: float,
    users: int = 8,
    record_share: float = 0.3,
    seed: int = 7,
    timeout_s: float = 60.0,
    ramp_s: float = 0.0,
) -> LoadResult:
    """``clients`` clients for ``seconds``: each call records one new fact (``record_share``)
    or searches, for a random one of ``users`` users. ``ramp_s``: the clients connect one
    after another over this long while those before them already load the server, as users
    arrive; else all connect before the clock starts. Over several processes on one socket
    a process that is busy with a call loses the accept to an idle one, so a ramp spreads
    the connections over the processes; connected at once, on a host whose other core is
    taken, the one process woken first can accept them all."""
    from memory_service.client import AsyncMemoryClient

    result = LoadResult()
    pool = [
        AsyncMemoryClient(base_url, key, max_retries=0, timeout=timeout_s) for _ in range(clients)
    ]

    async def arrive(i: int, client) -> None:
        if ramp_s:
            await asyncio.sleep(i * ramp_s / clients)
            await client.health()
        await _client(client, f"{seed}:{i}", users, record_share, deadline, result)

    try:
        if not ramp_s:
            for client in pool:  # each opens its connection before the clock starts
                await client.health()
        started = time.perf_counter()
        deadline = started + seconds
        await asyncio.gather(*(arrive(i, client) for i, client in enumerate(pool)))
        result.seconds = time.perf_counter() - started
    finally:
        for client in pool:
            await client.close()
    return result


async def _client(
    client, seed: str, users: int, record_share: float, deadline: float, result: LoadResult
) -> None:
    from memory_service.client import ApiConnectionError, ApiError

    rng = random.Random(seed)
    count = 0
    while time.perf_counter() < deadline:
        user = user_name(rng.randrange(users))
        writing = rng.random() < record_share
        t0 = time.perf_counter()
        try:
            if writing:
                count += 1
                words = " ".join(rng.sample(WORDS, 4))
                text = f"Note {seed}-{count}: the user keeps {words} in the {rng.choice(WORDS)} box"
                answer = await client.record(user, [text])
                result.record_ms.append(1000.0 * (time.perf_counter() - t0))
                result.written.append(Written(user, text, answer.results[0].id))
            else:
                question = rng.choice(QUESTIONS).format(w=rng.choice(WORDS))
                await client.search(user, question)
                result.search_ms.append(1000.0 * (time.perf_counter() - t0))
            result.answered_at.append(time.monotonic())
        except ApiError as exc:
            result.errors[f"{exc.status} {exc.code}"] += 1
        except ApiConnectionError:
            result.errors[f"transport ({'record' if writing else 'search'})"] += 1


async def lost_writes(base_url: str, key: str, written: Sequence[Written]) -> list[Written]:
    """The acknowledged writes that cannot be read back by id: the fact is gone, or holds
    neither the text nor a phrasing of it (a near-duplicate merge keeps it as one)."""
    from memory_service.client import AsyncMemoryClient, NotFoundError

    lost = []
    async with AsyncMemoryClient(base_url, key, timeout=60) as client:
        for write in written:
            try:
                fact = await client.get(write.user, write.fact_id)
            except NotFoundError:
                lost.append(write)
                continue
            if write.text not in {fact.text, *(p.text for p in fact.phrasings)}:
                lost.append(write)
    return lost
