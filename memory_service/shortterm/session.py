"""ShortTermMemory: the session operations the API and the harness call.

One append, in order: redact -> load the state -> evict big tool results -> append ->
compaction check (flush callback first) -> save with the loaded version -> log the messages.
Appending always works: when compaction is needed but no model is configured, or the model
fails, the messages are still stored and the result says why nothing was compacted.

Appends to one session take turns in this process (``KeyedLocks``). A plain append (no
``expected_version``) that still loses the save to another process reloads and tries again, a
bounded number of times with a growing, jittered pause; only an append that named a version
answers ``ConflictError``, because only that client has something to reload.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from indexing.embeddings import Embedder
from memory_service.config.memory_settings import CompactionSettings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import (
    BackendUnavailableError,
    ConflictError,
    FlushFailedError,
    MemoryServiceError,
    NotFoundError,
    UserErasedError,
)
from memory_service.domain.messages import Msg, check_message
from memory_service.domain.queries import check_query
from memory_service.domain.redaction import Redactor, total
from memory_service.llm import NOT_CONFIGURED_MESSAGE, ChatModel, LlmNotConfiguredError
from memory_service.observe.telemetry import sink
from memory_service.shortterm.compaction import ConversationCompactor, build_compactor
from memory_service.shortterm.compaction_base import CompactionResult, summary_trigger
from memory_service.shortterm.compaction_hook import (
    CompactionHook,
    count_compaction,
    with_pending,
)
from memory_service.shortterm.flush_callback import ArchiveCallback, FlushCallback, FlushOutcome
from memory_service.shortterm.session_locks import KeyedLocks
from memory_service.stores.shortterm.session_logs import SessionHit, SessionLogStore
from memory_service.stores.shortterm.session_state import AgentStateStore, SessionInfo
from memory_service.stores.shortterm.tool_results import ToolResultStore

log = logging.getLogger(__name__)

APPEND_ATTEMPTS = 8  # a plain append that loses the save to another process tries again
RETRY_PAUSE_S = 0.01  # before the second attempt; doubled for each later one, jittered
MAX_RETRY_PAUSE_S = 0.25

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AppendResult:
    state: AgentState
    appended: list[Msg]  # as stored in the state (with seq; evicted ones as previews)
    evicted: list[str] = field(default_factory=list)  # references of evicted tool results
    compaction: CompactionResult | None = None
    redacted: dict[str, int] = field(default_factory=dict)  # values replaced, by kind


def retry_pause(attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based): writers that collided
    spread out instead of colliding again."""
    return min(MAX_RETRY_PAUSE_S, RETRY_PAUSE_S * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)


def no_session(ctx: RuntimeContext) -> str:
    return f"no session {ctx.session_id!r} for this user"


def check_version(state: AgentState, ctx: RuntimeContext, expected: int | None) -> None:
    if expected is not None and state.version != expected:
        raise ConflictError(
            f"session {ctx.session_id!r} is at version {state.version}, not {expected}: "
            "reload it and apply the change again"
        )


class ShortTermMemory:
    """Sessions of every tenant and user, addressed by ``RuntimeContext`` (with session)."""

    def __init__(
        self,
        store: AgentStateStore,
        log: SessionLogStore,
        tool_results: ToolResultStore,
        *,
        config: CompactionSettings | None = None,
        model: ChatModel | None = None,
        context_window: int = 128_000,
        flush: FlushCallback | None = None,
        embedder: Embedder | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.store = store
        self.redactor = redactor or Redactor()  # every appended message passes it
        self.log = log
        self.tool_results = tool_results
        self.config = config or CompactionSettings()
        self.model = model
        self.context_window = self.config.context_window or context_window
        compactor = build_compactor(
            self.config, model, context_window=self.context_window, embedder=embedder
        )
        self.hook = CompactionHook(compactor, flush=flush) if compactor else None
        self.flush = flush
        self.archive: ArchiveCallback | None = None  # at the end of a session (set_archive)
        self._turns = KeyedLocks()  # appends to one session, one at a time

    def set_flush(self, flush: FlushCallback | None) -> None:
        """Wire the long-term pipeline's flush (called before every compaction, before a state
        expires and when a session ends)."""
        self.flush = flush
        if self.hook is not None:
            self.hook.flush = flush

    def set_archive(self, archive: ArchiveCallback | None) -> None:
        """Wire the long-term pipeline's session archive (run when a session ends; None:
        never, and ending a session with unflushed messages needs the flush's model)."""
        self.archive = archive

    # -- reads ----------------------------------------------------------------------------

    def load(self, ctx: RuntimeContext) -> AgentState:
        """The session's state; a new, empty one (version 0) when nothing is stored."""
        return self.store.load(ctx)

    def get(self, ctx: RuntimeContext) -> AgentState:
        """The stored state, or ``NotFoundError``: a session exists from its first saved
        change until it is deleted or expires, for reads as for deletes."""
        state = self.store.load(ctx)
        if state.is_new:
            raise NotFoundError(no_session(ctx))
        return state

    def list_sessions(self, ctx: RuntimeContext) -> list[SessionInfo]:
        return self.store.list_sessions(ctx)

    def evict_tool_result(self, ctx: RuntimeContext, message: Msg) -> Msg:
        """``message`` as the context of a call in progress keeps it: redacted, and a big
        tool result stored outside the conversation with its preview in its place (as an
        append would store it). ``discard_evicted`` takes the stored file back."""
        redacted, _ = self.redactor.message(message)
        return self.tool_results.evict(ctx, check_message(redacted))

    def discard_evicted(self, ctx: RuntimeContext, messages: Sequence[Msg]) -> None:
        """Remove the stored files of ``evict_tool_result``'s previews among ``messages``."""
        evicted = [m for m in messages if m.mark == "tool_result" and m.metadata.get("ref")]
        if evicted:
            self.tool_results.discard(ctx, evicted)

    def read_tool_result(
        self,
        ctx: RuntimeContext,
        ref: str,
        start_line: int | None = None,
        end_line: int | None = None,
    ) -> str:
        return self.tool_results.read(ctx, ref, start_line, end_line)

    def search(self, ctx: RuntimeContext, query: str, *, limit: int = 10) -> list[SessionHit]:
        check_query(query)  # the use cases' own rule, for a caller of the library
        return self.log.search(ctx, query, limit=limit)

    # -- writes ---------------------------------------------------------------------------

    def save(self, state: AgentState, ctx: RuntimeContext) -> None:
        """Store ``state`` as changed in place (a flush watermark, a compaction); raises
        ``ConflictError`` when another writer saved the session since it was loaded."""
        self.store.save(state, ctx)

    def append(
        self,
        ctx: RuntimeContext,
        messages: Sequence[Msg],
        *,
        expected_version: int | None = None,
        compact: bool = True,
    ) -> AppendResult:
        """Append ``messages`` to the session and save it; see the module docstring. A message
        ``messages.check_message`` refuses (over ``MAX_SESSION_MESSAGE_BYTES`` as a whole,
        metadata included; a control character in a label) is refused before anything is
        written. Each message is redacted first (``redaction``), so the state, the log and
        the evicted tool results hold the placeholders only; ``refuse``: nothing written."""
        redacted = [self.redactor.message(m) for m in messages]
        originals = [check_message(m) for m, _ in redacted]
        prepared: list[Msg] = []
        try:
            for message in originals:
                prepared.append(self.tool_results.evict(ctx, message))
        except BaseException:  # e.g. the user erased meanwhile: no file of this append stays
            done = zip(prepared, originals[: len(prepared)], strict=True)
            self.tool_results.discard(ctx, [m for m, o in done if m is not o])
            raise
        moved = [m for m, o in zip(prepared, originals, strict=True) if m is not o]
        evicted = [m.metadata["ref"] for m in moved]
        try:
            with self._turns.hold((ctx.tenant_id, ctx.user_id, ctx.session_id)):
                state, stored, compaction = self._save_appended(
                    ctx, prepared, expected_version, compact
                )
        except BaseException:
            self.tool_results.discard(ctx, moved)
            raise
        self.log.append(ctx, [o.with_seq(s.seq) for o, s in zip(originals, stored, strict=True)])
        return AppendResult(state, stored, evicted, compaction, total(c for _, c in redacted))

    def _save_appended(
        self,
        ctx: RuntimeContext,
        prepared: list[Msg],
        expected_version: int | None,
        compact: bool,
    ) -> tuple[AgentState, list[Msg], CompactionResult | None]:
        """Load, append, check compaction, save; a plain append retries a lost save."""
        attempts = 1 if expected_version is not None else APPEND_ATTEMPTS
        for attempt in range(1, attempts + 1):
            state = self.store.load(ctx)
            check_version(state, ctx, expected_version)
            stored = state.append(*prepared)
            compaction = self.check_compaction(state, ctx) if compact else None
            try:
                self.store.save(state, ctx)
                return state, stored, compaction
            except ConflictError:
                if expected_version is not None:
                    raise
                log.info("append to %s raced another writer (attempt %d)", ctx.session_id, attempt)
                if attempt < attempts:
                    time.sleep(retry_pause(attempt))
        raise BackendUnavailableError(
            f"session {ctx.session_id!r} is being written by other processes: {attempts} "
            "attempts to append lost the race; try again",
            code="session_busy",
        )

    def check_compaction(
        self, state: AgentState, ctx: RuntimeContext, pending: Sequence[Msg] = ()
    ) -> CompactionResult:
        """Compact ``state`` in place if a trigger fires, counting ``pending`` (the messages
        of a call in progress, not in the state yet); never raises for an LLM problem."""
        if self.hook is not None:
            return self.hook.before_reasoning(state, ctx, pending)
        tokens = state.token_estimate
        if summary_trigger(with_pending(state, pending), self.config, self.context_window) is None:
            return CompactionResult(False, "not_needed", 0, len(state.messages), tokens, tokens)
        state.flags["needs_compaction"] = True
        return CompactionResult(
            False,
            "no_model",
            0,
            len(state.messages),
            tokens,
            tokens,
            error=LlmNotConfiguredError("compaction is needed but no LLM is configured"),
        )

    def force_compact_and_retry(
        self,
        state: AgentState,
        ctx: RuntimeContext,
        call: Callable[[AgentState], T],
        on_compacted: Callable[[CompactionResult], None] | None = None,
    ) -> T:
        """``call(state)``; on a context overflow flush, compact ``state`` harder and call
        once more (see ``CompactionHook``). Without a compactor the overflow is raised."""
        if self.hook is None:
            return call(state)
        return self.hook.force_compact_and_retry(state, ctx, call, on_compacted)

    def compact(
        self,
        ctx: RuntimeContext,
        *,
        expected_version: int | None = None,
        keep_last: int | None = None,
    ) -> tuple[AgentState, CompactionResult]:
        """Compact now, whatever the triggers say (flush first); LLM errors are raised and
        the stored state is left as it was."""
        hook = self.hook
        if hook is None:
            raise LlmNotConfiguredError(f"compaction needs an LLM; {NOT_CONFIGURED_MESSAGE}")
        state = self.store.load(ctx)
        check_version(state, ctx, expected_version)
        flushed = hook.run_flush(state, ctx, "pre_compaction")
        try:
            if keep_last is not None and isinstance(hook.compactor, ConversationCompactor):
                result = hook.compactor.compact(state, reason="forced", keep_last=keep_last)
            else:
                result = hook.compactor.compact(state, reason="forced")
        except MemoryServiceError:
            sink().pipeline("compaction", "failed")
            if flushed.get("flushed"):
                self.store.save(state, ctx)  # keep the flush watermark; messages unchanged
            raise
        count_compaction(result, ctx)
        if result.performed or flushed.get("flushed"):
            self.store.save(state, ctx)
        return state, replace(result, **flushed)

    def delete(self, ctx: RuntimeContext, *, include_log: bool = False) -> dict[str, int | bool]:
        """Remove the session's state and evicted tool results (and its log, if asked);
        ``NotFoundError`` when there was none of them."""
        removed = self.store.remove(ctx)
        files = self.tool_results.remove_session(ctx)
        log_removed = self.log.delete_session(ctx) if include_log else False
        if not (removed or files or log_removed):
            raise NotFoundError(no_session(ctx))
        return {"state": removed, "tool_results": files, "log": log_removed}

    def end(self, ctx: RuntimeContext) -> tuple[FlushOutcome | None, dict]:
        """End the session: archive its messages as events (when an archive is wired: no
        model needed), flush what is unflushed, then clear its state and evicted tool results
        (the session log stays, under its retention). Returns the flush's outcome (None: it
        did not run) and ``archive`` (the archive's counts, None when it did not run),
        ``state`` and ``tool_results`` (what was cleared). ``NotFoundError`` when there is no
        session; a flush that fails raises ``FlushFailedError`` and clears nothing (its
        messages are in a dead letter; what the archive recorded stays, and archiving again
        records nothing new). With an archive, a flush that has no model is skipped; without
        one it is ``LlmNotConfiguredError``, and nothing is cleared."""
        state = self.get(ctx)
        archived = self.archive(state, ctx).to_dict() if self.archive is not None else None
        outcome = None
        if state.unflushed():
            try:
                if self.flush is None:
                    raise LlmNotConfiguredError(
                        "ending a session flushes it to long-term memory first; "
                        + NOT_CONFIGURED_MESSAGE
                    )
                outcome = self.flush(state, ctx, "end")
            except LlmNotConfiguredError:
                if archived is None:
                    raise
        cleared = self.delete(ctx)
        return outcome, {
            "archive": archived,
            "state": bool(cleared["state"]),
            "tool_results": cleared["tool_results"],
        }

    def purge_expired(self) -> int:
        """Delete the states past the store's TTL (``ttl_hours``); how many went. An expired
        state with unflushed messages is flushed first (reason ``expiry``) and kept while that
        flush fails, so nothing said is lost to an expiry."""
        keep = self._flush_before_expiry if self.flush is not None else None
        return self.store.purge_expired(keep)

    def _flush_before_expiry(self, ctx: RuntimeContext, state: AgentState) -> bool:
        """Whether to keep an expired state: only when its flush failed."""
        if not state.unflushed() or self.flush is None:
            return False
        try:
            self.flush(state, ctx, "expiry")
        except FlushFailedError:
            return True  # its dead letter has the messages; the state waits for a good flush
        except UserErasedError:
            return False
        return False

    def close(self) -> None:
        self.store.close()
