"""Evicted tool results as files: ``.../users/<user>/tool-results/<session>/<id>.txt``.
References are confined to the user's own tool-results folder: absolute paths, ``..`` and
symlinks that lead elsewhere are refused.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
from pathlib import Path, PurePosixPath

from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidIdError, InvalidInputError
from memory_service.domain.messages import Msg
from memory_service.domain.paths import TOOL_RESULTS_DIR, OwnerPaths
from memory_service.stores.fsutil import write_atomically
from memory_service.stores.shortterm.session_state import session_of
from memory_service.stores.shortterm.tool_results import (
    check_line_range,
    check_sizes,
    evicted_refs,
    line_range,
    needs_eviction,
    not_found,
    preview_of,
    reference_parts,
    result_id_base,
)
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.tombstones.files import FilesTombstones

_NO_SUCH_FILE = {errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP}


class FilesToolResultStore:
    """Moves long tool results out of the state into the user's folder and reads them back."""

    def __init__(
        self,
        workspace: Path,
        *,
        max_chars: int = 20_000,
        preview_chars: int = 2_000,
        tombstones: Tombstones | None = None,
    ) -> None:
        check_sizes(max_chars, preview_chars)
        self.workspace = Path(workspace)
        self.max_chars = max_chars
        self.preview_chars = min(preview_chars, max_chars)
        self._tombstones = tombstones or FilesTombstones(self.workspace)

    def _paths(self, ctx: RuntimeContext) -> OwnerPaths:
        return OwnerPaths.of(self.workspace, ctx)

    def needs_eviction(self, message: Msg) -> bool:
        return needs_eviction(message, self.max_chars)

    def evict(self, ctx: RuntimeContext, message: Msg) -> Msg:
        """``message``, or its preview when it is a tool result over the size limit."""
        if not self.needs_eviction(message):
            return message
        paths = self._paths(ctx)
        session = session_of(ctx)
        path = paths.inside(paths.tool_result(session, self._file_id(paths, session, message)))
        self._tombstones.check(ctx)
        write_atomically(path, message.content)
        if self._tombstones.refuses(ctx):  # no lock is shared with an erase: take it back
            path.unlink(missing_ok=True)
            self._tombstones.check(ctx)
        ref = PurePosixPath(path.relative_to(paths.root.resolve())).as_posix()
        return preview_of(message, ref, self.preview_chars)

    @staticmethod
    def _file_id(paths: OwnerPaths, session: str, message: Msg) -> str:
        """The tool call's id when it is a safe name, made unique within the session."""
        base = result_id_base(message)
        candidate, n = base, 1
        while paths.tool_result(session, candidate).exists():
            n += 1
            candidate = f"{base}-{n}"
        return candidate

    def resolve(self, ctx: RuntimeContext, ref: str) -> Path:
        """The file behind ``ref``, refused unless it is inside the tool results of the
        context's session."""
        session, name = reference_parts(ctx, ref)
        paths = self._paths(ctx)
        path = paths.inside(paths.root.joinpath(TOOL_RESULTS_DIR, session, name))
        if paths.tool_results_dir(session).resolve() not in path.parents:
            raise InvalidIdError(
                "reference escapes the tool results folder", code="path_outside_user"
            )
        return path

    def read(
        self,
        ctx: RuntimeContext,
        ref: str,
        start_line: int | None = None,
        end_line: int | None = None,
    ) -> str:
        """The evicted text, or lines ``start_line..end_line`` of it (1-based, inclusive)."""
        path = self.resolve(ctx, ref)
        check_line_range(start_line, end_line)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:  # missing, a folder, or a name no file can have (too long)
            if exc.errno not in _NO_SUCH_FILE:
                raise
            raise not_found(ref) from None
        return line_range(text, start_line, end_line)

    def remove_session(self, ctx: RuntimeContext) -> int:
        """Delete a session's evicted results; returns how many files went."""
        paths = self._paths(ctx)
        folder = paths.inside(paths.tool_results_dir(session_of(ctx)))
        if not folder.is_dir():
            return 0
        count = sum(1 for _ in folder.glob("*.txt"))
        shutil.rmtree(folder)
        return count

    def count_user(self, ctx: RuntimeContext) -> int:
        """How many evicted tool results the user has, in every session."""
        root = self._paths(ctx).tool_results_root
        if root.is_symlink() or not root.is_dir():
            return 0
        return sum(1 for p in root.rglob("*") if p.is_file())

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Delete the user's evicted tool results, every session's; how many files went."""
        paths = self._paths(ctx)
        root = paths.tool_results_root
        if root.is_symlink():
            root.unlink()  # a link planted there: never followed out of the user's folder
            return 0
        count = self.count_user(ctx)
        if root.is_dir():
            shutil.rmtree(paths.inside(root))
        return count

    def discard(self, ctx: RuntimeContext, messages: list[Msg]) -> None:
        """Delete the files of evicted messages that were never saved (a failed append)."""
        for ref in evicted_refs(messages):
            with contextlib.suppress(InvalidInputError, OSError):
                self.resolve(ctx, ref).unlink(missing_ok=True)
