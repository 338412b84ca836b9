"""The one migration path of session logs and evicted tool results: from a workspace into
PostgreSQL, when a deployment moves its replica state there (``MEMORY_STATE__BACKEND``).

A replica's start (``services.build_session_logs``) moves what its workspace still holds:
every user's ``sessions/<session>.log.jsonl`` (each message with the time it was logged) and
``tool-results/<session>/<id>.txt`` (under the same reference, so a conversation's previews
keep resolving), one transaction per session, then deletes the files. A copy already there is
skipped, so a move cut short runs again without duplicates; a user being erased is left to the
erase. Run it while no process still writes the workspace's logs (as at a switch: every
replica restarted on PostgreSQL). Folders that are links, and names that are no ids, are left
alone.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from memory_service.context import RuntimeContext, validate_id
from memory_service.errors import InvalidIdError, InvalidInputError, NotFoundError, UserErasedError
from memory_service.paths import TOOL_RESULTS_DIR, UserPaths, WorkspacePaths
from memory_service.shortterm.eviction import RESULT_SUFFIX, ToolResultEvictor
from memory_service.shortterm.eviction_pg import PostgresToolResults
from memory_service.shortterm.session_log import SessionLog
from memory_service.shortterm.session_log_pg import PostgresSessionLog

log = logging.getLogger(__name__)


def _ids(folder: Path) -> list[str]:
    """The sub-folders of ``folder`` named by valid ids (links skipped)."""
    if not folder.is_dir() or folder.is_symlink():
        return []
    found = []
    for child in sorted(folder.iterdir()):
        try:
            if child.is_dir() and not child.is_symlink():
                found.append(validate_id(child.name))
        except InvalidIdError:
            continue
    return found


def workspace_users(workspace: Path) -> list[RuntimeContext]:
    """Every user with a folder in ``workspace`` (logs and tool results are per user)."""
    where = WorkspacePaths(Path(workspace))
    tenants = _ids(where.tenants_dir)
    return [RuntimeContext(t, user) for t in tenants for user in _ids(where.users_dir(t))]


def move_workspace_logs(
    workspace: Path, logs: PostgresSessionLog, results: PostgresToolResults
) -> tuple[int, int]:
    """Move ``workspace``'s session logs and tool results into PostgreSQL; how many
    messages and results were copied (see the module docstring)."""
    files_log, files_results = SessionLog(workspace), ToolResultEvictor(workspace)
    messages = copied = 0
    for user in workspace_users(workspace):
        try:
            messages += _move_logs(user, files_log, logs)
            copied += _move_results(user, files_results, results)
        except UserErasedError:
            continue  # its erase removes the files
    if messages or copied:
        log.info("moved %d logged messages, %d tool results to PostgreSQL", messages, copied)
    return messages, copied


def _move_logs(user: RuntimeContext, files: SessionLog, logs: PostgresSessionLog) -> int:
    moved = 0
    for session_id in files.sessions(user):
        ctx = user.with_session(session_id)
        entries = files.read(ctx)
        if entries:
            moved += logs.copy_in(ctx, entries)
        files.delete_session(ctx)
    return moved


def _move_results(
    user: RuntimeContext, files: ToolResultEvictor, results: PostgresToolResults
) -> int:
    moved = 0
    for session_id in _ids(UserPaths.of(files.workspace, user).tool_results_root):
        ctx = user.with_session(session_id)
        bodies: dict[str, str] = {}
        paths: list[Path] = []
        folder = UserPaths.of(files.workspace, ctx).tool_results_dir(session_id)
        for path in sorted(folder.glob(f"*{RESULT_SUFFIX}")):
            ref = f"{TOOL_RESULTS_DIR}/{session_id}/{path.name}"
            try:
                result_id = validate_id(path.name.removesuffix(RESULT_SUFFIX))
                bodies[result_id] = files.read(ctx, ref)
            except (InvalidInputError, NotFoundError):
                continue  # a link out of the folder, or a name no store would give: kept
            paths.append(path)
        if bodies:
            moved += results.copy_in(ctx, bodies)
        for path in paths:
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when nothing else is left in it
    return moved
