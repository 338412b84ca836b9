"""Deleting facts everywhere they live, and erasing a user from every store.

Facts (``erase_facts``, ``forget_user``): MEMORY.md is derived from the facts (consolidation),
and with the Qdrant backend it is a document beside the points (``memory_docs``); a model may
also have paraphrased a fact into it. Deleting a fact, or forgetting a user's facts, must not
leave it there to be injected into the next prompt, so the API deletes through these
functions, not the backend.

A user (``UserErasure``): everything the service keeps of one user, in every store the
composition root lists (``services.build_erasure``), each removing its own data through its own
``erase_user`` under the lock its writers take. The user's tombstone (``tombstones``) is
written first and finished last, so a request or flush that was running meanwhile cannot write
anything back. Unknown user (nothing stored anywhere): ``NotFoundError`` and nothing written.
The receipt counts what went per store; one audit line says who erased whom, with no content.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from indexing.hashing import content_hash
from indexing.tokenize import tokenize
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import NotFoundError
from memory_service.domain.facts import Fact, utcnow
from memory_service.domain.paths import OwnerPaths
from memory_service.longterm.files.fact_files import parse_fact_file, rewrite_fact_file
from memory_service.longterm.protocol import LongTermMemory
from memory_service.pipeline.consolidation import COVERAGE_MIN
from memory_service.stores.fsutil import TEMP_SUFFIX, file_lock
from memory_service.stores.memory_docs import MemoryDocs
from memory_service.stores.memory_docs.files import documents
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.tombstones.files import FilesTombstones
from memory_service.stores.user_data import UserData

audit = logging.getLogger("memory_service.audit")


def _mentions(bullet: Fact, fact: Fact) -> bool:
    """The bullet is the fact, or holds most of its terms (a paraphrase of it)."""
    if content_hash(bullet.text) == content_hash(fact.text):
        return True
    terms = set(tokenize(fact.text))
    return bool(terms) and len(terms & set(tokenize(bullet.text))) / len(terms) >= COVERAGE_MIN


def drop_from_memory_md(docs: MemoryDocs, ctx: RuntimeContext, facts: Sequence[Fact]) -> int:
    """Remove the bullets of the owner's MEMORY.md that state any of ``facts``; how many."""
    dropped = 0

    def without(content: str) -> str | None:
        nonlocal dropped
        drop = {
            line.line_no: None
            for line in parse_fact_file(content, default_created_at=None)
            if any(_mentions(line.fact, f) for f in facts)
        }
        dropped = len(drop)
        return rewrite_fact_file(content, drop) if drop else None

    if facts:
        docs.edit(ctx, without)
    return dropped


def erase_facts(
    longterm: LongTermMemory,
    workspace: Path,
    ctx: RuntimeContext,
    ids: Sequence[str],
    *,
    docs: MemoryDocs | None = None,
) -> int:
    """Delete ``ids`` from the backend and their bullets from MEMORY.md (in ``docs``, else
    the workspace's files)."""
    facts = longterm.get(ctx, ids)
    deleted = longterm.delete(ctx, ids)
    drop_from_memory_md(documents(docs, workspace), ctx, facts)
    return deleted


def forget_user(
    longterm: LongTermMemory,
    workspace: Path,
    ctx: RuntimeContext,
    *,
    docs: MemoryDocs | None = None,
) -> int:
    """Forget every long-term fact of the user, MEMORY.md and its snapshots included (facts
    only: sessions, logs and the rest stay; ``UserErasure`` erases all of it)."""
    count = longterm.forget(ctx)
    if docs is not None:
        docs.erase_user(ctx)  # wherever they live; the files go with the ledgers below
    paths = OwnerPaths.of(workspace, ctx)
    if paths.root.is_dir():
        with file_lock(paths.lock_file, timeout=60):
            paths.memory_md.unlink(missing_ok=True)
            paths.maintenance_state.unlink(missing_ok=True)
            if paths.ledger_dir.exists():
                shutil.rmtree(paths.ledger_dir)  # archived ledgers and MEMORY.md snapshots
    return count


# -- erasing a user --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EraseReceipt:
    """What an erase removed, per store (by the names ``build_erasure`` gives them), when it
    finished and on whose authority (an API key's fingerprint, or the CLI)."""

    tenant_id: str
    user_id: str
    erased_at: datetime
    by: str
    removed: Mapping[str, int]
    left_behind: int = 0  # files in the user's folder no store claimed (kept, and logged)

    @property
    def total(self) -> int:
        return sum(self.removed.values())

    def to_dict(self) -> dict:
        return {
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "erased_at": self.erased_at.isoformat(),
            "by": self.by,
            "removed": dict(self.removed),
            "total": self.total,
            "left_behind": self.left_behind,
        }


@dataclass
class UserErasure:
    """Erases users from ``stores`` (name -> store, erased in that order); ``close`` releases
    the stores that were opened for it."""

    workspace: Path
    stores: Sequence[tuple[str, UserData]]
    clock: Callable[[], datetime] = utcnow
    on_close: Sequence[Callable[[], None]] = field(default_factory=list)
    tombstones: Tombstones | None = None  # None: the workspace's (files)

    def inventory(self, ctx: RuntimeContext) -> dict[str, int]:
        """What each store holds of the user (reads only)."""
        return {name: store.count_user(ctx) for name, store in self.stores}

    def erase(self, ctx: RuntimeContext, *, by: str) -> EraseReceipt:
        """Erase everything of ``ctx``'s user; ``NotFoundError`` (nothing written) when no
        store holds anything of them. Running it again after a failure finishes the job."""
        tombstones = self.tombstones or FilesTombstones(self.workspace)
        paths = OwnerPaths.of(self.workspace, ctx)
        pending = tombstones.read(ctx)
        unfinished = pending is not None and pending.erased_at is None
        if not unfinished and not paths.root.exists() and not any(self.inventory(ctx).values()):
            raise NotFoundError(f"no data for user {ctx.user_id!r} in this tenant")
        began = pending.since if unfinished and pending is not None else self.clock()
        tombstones.begin(ctx, began)  # from here on every write for the user is refused
        removed = {name: store.erase_user(ctx) for name, store in self.stores}
        left = _sweep(paths)
        finished = self.clock()
        tombstones.finish(ctx, began, finished)
        receipt = EraseReceipt(ctx.tenant_id, ctx.user_id, finished, by, removed, len(left))
        audit.info(
            "user erased: tenant=%s user=%s by=%s removed=%s total=%d left_behind=%d",
            ctx.tenant_id,
            ctx.user_id,
            by,
            ",".join(f"{k}:{v}" for k, v in removed.items()),
            receipt.total,
            len(left),
        )
        for path in left:
            audit.warning("erase of %s/%s left %s (no store claims it)", *_who(ctx), path)
        return receipt

    def close(self) -> None:
        for release in self.on_close:
            release()


def _who(ctx: RuntimeContext) -> tuple[str, str]:
    return ctx.tenant_id, ctx.user_id


def _sweep(paths: OwnerPaths) -> list[str]:
    """After every store erased its part: remove the user's lock files, the temp files of
    killed writes and the folders left empty, the user's folder last. Returns the files left
    (their paths inside the folder), which no store claimed."""
    root = paths.root
    if root.is_symlink():
        root.unlink()
        return []
    if not root.is_dir():
        return []
    left: list[str] = []
    for folder, dirs, files in os.walk(root, topdown=False):  # links are not followed
        here = Path(folder)
        for name in files:
            path = here / name
            if name.endswith(".lock") or (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
                path.unlink(missing_ok=True)
            else:
                left.append(str(path.relative_to(root)))
        for name in dirs:
            if (here / name).is_symlink():
                (here / name).unlink()
        try:
            here.rmdir()
        except OSError:  # not empty: something was left
            continue
    return sorted(left)
