"""A rewrite's new shard built in a child process, off the serving process's GIL.

Edge's binding holds the GIL through each call, and turning a read point into a point to
write (``qe.Point``: the payload and vectors handed to Rust) and writing it cost about three
quarters of a copied page. A rewrite that runs beside the calls (a delete's, in the
background) therefore sends each page, as read, to a child process that builds and writes the
new shard: what stays in the serving process is the read and the pickling, and a call that
meets a page waits for that alone. The child runs at a lower priority (``nice``), so the
calls keep the cores first.

The channel is the child's stdin and stdout, one pickled message each way at a time: pages,
deletes, and ``flush``/``close``, which the child answers once done (or with the error that
stopped it; the rewrite then fails, and its marker stays for the next one).

    python -m memory_service.longterm.qdrant.edge.copier   # run by ShardCopier only
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from memory_service.longterm.qdrant.filters import OwnerFilter
from memory_service.longterm.qdrant.points import StoredPoint

NICE = 10  # how much lower the child's priority is than the service's
STARTED = "started"
DONE = "done"


class CopierError(RuntimeError):
    """The child stopped: its own error, or its exit."""


class ShardCopier:
    """The parent's end: ``start`` a child that makes the new shard in ``building`` (a copy
    of the empty one in ``empty``), send it what to write, then ``close`` (it flushes what it
    wrote when told to, and closes the shard) or ``abort``."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process
        self._to: IO[bytes] = process.stdin  # type: ignore[assignment]
        self._from: IO[bytes] = process.stdout  # type: ignore[assignment]

    @classmethod
    def start(cls, building: Path, empty: Path, dimension: int) -> ShardCopier:
        process = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        copier = cls(process)
        try:
            copier._send(("open", str(building), str(empty), dimension))
            copier._answer()
        except BaseException:
            copier.abort()
            raise
        return copier

    def upsert(self, points: Sequence[StoredPoint]) -> None:
        if points:
            self._send(("upsert", list(points)))

    def delete_ids(self, ids: Sequence[str]) -> None:
        if ids:
            self._send(("delete_ids", list(ids)))

    def delete_scope(self, scope: OwnerFilter) -> None:
        self._send(("delete_scope", scope))

    def flush(self) -> None:
        """Everything sent so far written and on disk."""
        self._send(("flush",))
        self._answer()

    def close(self) -> None:
        """The shard closed and the child gone: the folder is the parent's to open."""
        self._send(("close",))
        self._answer()
        self._to.close()
        self._process.wait()
        self._from.close()

    def abort(self) -> None:
        """The child stopped at once (a failed rewrite: its folder is removed after)."""
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        for stream in (self._to, self._from):
            with contextlib.suppress(OSError):
                stream.close()

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            pickle.dump(message, self._to, protocol=pickle.HIGHEST_PROTOCOL)
            self._to.flush()
        except (BrokenPipeError, OSError) as exc:
            raise CopierError(f"the shard copier stopped ({self._exit()})") from exc

    def _answer(self) -> None:
        try:
            answer = pickle.load(self._from)
        except (EOFError, OSError, pickle.UnpicklingError) as exc:
            raise CopierError(f"the shard copier stopped ({self._exit()})") from exc
        if answer != DONE and answer != STARTED:
            raise CopierError(f"the shard copier failed: {answer}")

    def _exit(self) -> str:
        code = self._process.poll()
        return "still running" if code is None else f"exit {code}"


def _serve(inbox: IO[bytes], outbox: IO[bytes]) -> int:
    """The child: build the shard from the messages until ``close`` (or the parent goes)."""
    import qdrant_edge as qe

    from memory_service.longterm.qdrant.edge.filters import edge_filter
    from memory_service.longterm.qdrant.edge.shard import copy_of_empty, edge_vectors

    def reply(answer: str) -> None:
        pickle.dump(answer, outbox, protocol=pickle.HIGHEST_PROTOCOL)
        outbox.flush()

    shard = None
    try:
        while True:
            try:
                message = pickle.load(inbox)
            except EOFError:  # the parent went: nothing is swapped in
                return 1
            kind = message[0]
            if kind == "open":
                shard = copy_of_empty(Path(message[1]), Path(message[2]), int(message[3]))
                reply(STARTED)
            elif shard is None:
                reply("no shard opened")
                return 1
            elif kind == "upsert":
                points = [qe.Point(p.id, edge_vectors(p), p.payload) for p in message[1]]
                shard.update(qe.UpdateOperation.upsert_points(points))
            elif kind == "delete_ids":
                shard.update(qe.UpdateOperation.delete_points(message[1]))
            elif kind == "delete_scope":
                shard.update(qe.UpdateOperation.delete_points_by_filter(edge_filter(message[1])))
            elif kind == "flush":
                shard.flush()
                reply(DONE)
            elif kind == "close":
                shard.flush()
                shard.close()
                shard = None
                reply(DONE)
                return 0
    except Exception as exc:  # noqa: BLE001 - told to the parent, which fails the rewrite
        reply(f"{type(exc).__name__}: {exc}")
        return 1
    finally:
        if shard is not None:
            shard.close()


def main() -> int:
    with contextlib.suppress(OSError):
        os.nice(NICE)
    return _serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    raise SystemExit(main())
