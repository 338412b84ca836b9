"""Deleting facts everywhere they live: the backend, and the user's consolidated MEMORY.md.

MEMORY.md is derived from the facts (consolidation), and with the Qdrant backend it is a file
beside the points; a model may also have paraphrased a fact into it. Deleting a fact, or
forgetting a user, must not leave it there to be injected into the next prompt, so the API and
CLI delete through these functions rather than the backend alone.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from filelock import FileLock

from indexing.hashing import content_hash
from indexing.tokenize import tokenize
from memory_service.context import RuntimeContext
from memory_service.facts import Fact
from memory_service.fsutil import read_text, write_atomically
from memory_service.longterm.base import LongTermMemory
from memory_service.longterm.ledger import parse_ledger, rewrite_ledger
from memory_service.paths import UserPaths
from memory_service.pipeline.consolidation import COVERAGE_MIN


def _mentions(bullet: Fact, fact: Fact) -> bool:
    """The bullet is the fact, or holds most of its terms (a paraphrase of it)."""
    if content_hash(bullet.text) == content_hash(fact.text):
        return True
    terms = set(tokenize(fact.text))
    return bool(terms) and len(terms & set(tokenize(bullet.text))) / len(terms) >= COVERAGE_MIN


def drop_from_memory_md(paths: UserPaths, facts: Sequence[Fact]) -> int:
    """Remove the bullets of MEMORY.md that state any of ``facts``; returns how many."""
    if not facts or not paths.memory_md.is_file():
        return 0
    with FileLock(str(paths.lock_file), timeout=60):
        content = read_text(paths.memory_md)
        drop = {
            line.line_no: None
            for line in parse_ledger(content, default_created_at=None)
            if any(_mentions(line.fact, f) for f in facts)
        }
        if drop:
            write_atomically(paths.memory_md, rewrite_ledger(content, drop))
    return len(drop)


def erase_facts(
    longterm: LongTermMemory, workspace: Path, ctx: RuntimeContext, ids: Sequence[str]
) -> int:
    """Delete ``ids`` from the backend and their bullets from MEMORY.md."""
    facts = longterm.get(ctx, ids)
    deleted = longterm.delete(ctx, ids)
    drop_from_memory_md(UserPaths.of(workspace, ctx), facts)
    return deleted


def erase_user(longterm: LongTermMemory, workspace: Path, ctx: RuntimeContext) -> int:
    """Forget every long-term fact of the user, MEMORY.md and its snapshots included."""
    count = longterm.forget(ctx)
    paths = UserPaths.of(workspace, ctx)
    if paths.root.is_dir():
        with FileLock(str(paths.lock_file), timeout=60):
            paths.memory_md.unlink(missing_ok=True)
            paths.maintenance_state.unlink(missing_ok=True)
            if paths.ledger_dir.exists():
                shutil.rmtree(paths.ledger_dir)  # archived ledgers and MEMORY.md snapshots
    return count
