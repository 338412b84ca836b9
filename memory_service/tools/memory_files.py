"""Which files the memory tools may read: MEMORY.md and the daily ledgers of the caller.

MEMORY.md and its snapshots are read through ``MemoryDocs`` when they are not files of the
workspace (PostgreSQL, with the Qdrant backend): their names are checked as text, the same
way, and they are looked up for the context's owner only.

A path the model names is checked twice: as text (``memory_path_parts``: relative, plain
ASCII, no ``..``, no encoding tricks, a memory file's name) and once resolved (``resolve``:
a symlink that leads out of the user's memory files is refused). The model names files, never
users: the folder always comes from the ``RuntimeContext``.
"""

from __future__ import annotations

import re
from pathlib import Path

from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidIdError, InvalidInputError, NotFoundError
from memory_service.domain.limits import MAX_TOOL_PATH_CHARS
from memory_service.domain.paths import OwnerPaths
from memory_service.stores.fsutil import read_text
from memory_service.stores.memory_docs import MEMORY_MD, MemoryDocs, is_memory_doc

_SAFE_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.md")
_ENCODED = re.compile(r"%[0-9A-Fa-f]{2}")
_DRIVE = re.compile(r"^[A-Za-z]:")


def _refuse(message: str, code: str = "invalid_path") -> InvalidInputError:
    if code == "path_outside_user":
        return InvalidIdError(message, code=code)
    return InvalidInputError(message, code=code)


def memory_path_parts(path: object) -> tuple[str, ...]:
    """The parts of a memory file path, or a clear error. Checks the text only; symlinks are
    checked when the path is resolved."""
    if not isinstance(path, str) or not path.strip():
        raise _refuse("path must be a relative path such as MEMORY.md or memory/2025-01-31.md")
    if len(path) > MAX_TOOL_PATH_CHARS:
        raise _refuse(f"path is longer than {MAX_TOOL_PATH_CHARS} characters")
    if "\x00" in path or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        raise _refuse("path must not contain NUL or control characters")
    if _ENCODED.search(path):
        raise _refuse("percent-encoded characters are not allowed in a path")
    if not path.isascii():
        raise _refuse("path must be plain ASCII (no look-alike dots or slashes)")
    if "\\" in path:
        raise _refuse("use '/' as the path separator, not '\\'")
    if path.startswith(("/", "~")) or _DRIVE.match(path):
        raise _refuse(
            "absolute paths are refused: give a path relative to your memory folder",
            "path_outside_user",
        )
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    if ".." in parts:
        raise _refuse("'..' is refused: paths stay inside your memory folder", "path_outside_user")
    if parts == ("MEMORY.md",):
        return parts
    in_ledgers = len(parts) == 2 or (len(parts) == 3 and parts[1] == "archive")
    if parts and parts[0] == "memory" and in_ledgers and _SAFE_FILE.fullmatch(parts[-1]):
        return parts
    raise _refuse(
        f"{path!r} is not a memory file: use MEMORY.md, memory/<file>.md or "
        "memory/archive/<file>.md"
    )


def resolve(workspace: Path, ctx: RuntimeContext, path: str) -> Path:
    """The memory file ``path`` names, refused unless it really is one of the user's."""
    parts = memory_path_parts(path)
    paths = OwnerPaths.of(workspace, ctx)
    resolved = paths.inside(paths.root.joinpath(*parts))
    allowed = paths.memory_md.resolve()
    if resolved != allowed and paths.ledger_dir.resolve() not in resolved.parents:
        raise _refuse(f"{path!r} leads outside your memory files", "path_outside_user")
    if not resolved.is_file():
        raise NotFoundError(f"no memory file {path!r}")
    return resolved


def memory_files(workspace: Path, ctx: RuntimeContext) -> list[tuple[str, Path]]:
    """MEMORY.md, then the daily ledgers newest first (archived ledgers are not searched);
    a file that is a link out of the user's folder is skipped."""
    paths = OwnerPaths.of(workspace, ctx)
    found = [("MEMORY.md", paths.memory_md)]
    if paths.ledger_dir.is_dir():
        ledgers = list(reversed(paths.ledger_candidates()))
        found += [(f"memory/{p.name}", p) for p in ledgers]
    usable = []
    for rel, path in found:
        try:
            resolve(workspace, ctx, rel)
        except (InvalidInputError, NotFoundError):
            continue
        usable.append((rel, path))
    return usable


def _stored_apart(docs: MemoryDocs | None) -> bool:
    """Whether MEMORY.md and its snapshots live outside the workspace (no file to resolve)."""
    return docs is not None and not docs.in_workspace


def memory_text(
    workspace: Path, ctx: RuntimeContext, path: str, docs: MemoryDocs | None = None
) -> str:
    """The text of the memory file ``path`` names (``resolve``'s rules; MEMORY.md and its
    snapshots from ``docs`` when they are not files); ``NotFoundError`` when there is none."""
    name = "/".join(memory_path_parts(path))
    if _stored_apart(docs) and is_memory_doc(name):
        assert docs is not None
        text = docs.read_named(ctx, name)
        if text is None:
            raise NotFoundError(f"no memory file {path!r}")
        return text
    return read_text(resolve(workspace, ctx, path))


def memory_texts(
    workspace: Path, ctx: RuntimeContext, docs: MemoryDocs | None = None
) -> list[tuple[str, str]]:
    """(name, text) of MEMORY.md, then of the daily ledgers newest first (``memory_files``;
    MEMORY.md from ``docs`` when it is not a file)."""
    if not _stored_apart(docs):
        return [(rel, read_text(path)) for rel, path in memory_files(workspace, ctx)]
    assert docs is not None
    text = docs.read_named(ctx, MEMORY_MD)
    found = [(MEMORY_MD, text)] if text is not None else []
    ledgers = [(rel, p) for rel, p in memory_files(workspace, ctx) if rel != MEMORY_MD]
    return found + [(rel, read_text(path)) for rel, path in ledgers]
