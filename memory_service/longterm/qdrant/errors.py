"""What an engine's failure becomes: a ``BackendUnavailableError`` whose message names only
the collection (it reaches API clients), while the log gets the engine's own text (which may
name the server's address or the folder's files)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from memory_service.domain.errors import BackendUnavailableError, MemoryServiceError


@contextmanager
def engine_calls(
    log: logging.Logger, where: str, message: Callable[[Exception], str]
) -> Iterator[None]:
    """Map an exception of the calls inside to ``message(exc)``, logging ``where`` and the
    cause; the service's own errors pass through."""
    try:
        yield
    except MemoryServiceError:
        raise
    except Exception as exc:
        log.error("%s failed: %s", where, exc)
        raise BackendUnavailableError(message(exc)) from exc
