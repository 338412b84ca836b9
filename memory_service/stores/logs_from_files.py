"""The one migration path of session logs and evicted tool results: from a workspace into
PostgreSQL, when a deployment moves its replica state there (``MEMORY_STATE__BACKEND``).

A replica's start (``ReplicaStores.session_logs``) moves what its workspace still holds:
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

from memory_service.domain.context import RuntimeContext, validate_id
from memory_service.domain.errors import InvalidInputError, NotFoundError, UserErasedError
from memory_service.domain.paths import TOOL_RESULTS_DIR, OwnerPaths, WorkspacePaths, id_folders
from memory_service.stores.shortterm.session_logs.files import FilesSessionLogStore
from memory_service.stores.shortterm.session_logs.postgres import PostgresSessionLogStore
from memory_service.stores.shortterm.tool_results import RESULT_SUFFIX
from memory_service.stores.shortterm.tool_results.files import FilesToolResultStore
from memory_service.stores.shortterm.tool_results.postgres import PostgresToolResultStore

log = logging.getLogger(__name__)


def workspace_users(workspace: Path) -> list[RuntimeContext]:
    """Every user with a folder in ``workspace`` (logs and tool results are per user)."""
    where = WorkspacePaths(Path(workspace))
    tenants = id_folders(where.tenants_dir)
    return [RuntimeContext(t, user) for t in tenants for user in id_folders(where.users_dir(t))]


def move_workspace_logs(
    workspace: Path, logs: PostgresSessionLogStore, results: PostgresToolResultStore
) -> tuple[int, int]:
    """Move ``workspace``'s session logs and tool results into PostgreSQL; how many
    messages and results were copied (see the module docstring)."""
    files_log, files_results = FilesSessionLogStore(workspace), FilesToolResultStore(workspace)
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


def _move_logs(
    user: RuntimeContext, files: FilesSessionLogStore, logs: PostgresSessionLogStore
) -> int:
    moved = 0
    for session_id in files.sessions(user):
        ctx = user.with_session(session_id)
        entries = files.read(ctx)
        if entries:
            moved += logs.copy_in(ctx, entries)
        files.delete_session(ctx)
    return moved


def _move_results(
    user: RuntimeContext, files: FilesToolResultStore, results: PostgresToolResultStore
) -> int:
    moved = 0
    for session_id in id_folders(OwnerPaths.of(files.workspace, user).tool_results_root):
        ctx = user.with_session(session_id)
        bodies: dict[str, str] = {}
        paths: list[Path] = []
        folder = OwnerPaths.of(files.workspace, ctx).tool_results_dir(session_id)
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
