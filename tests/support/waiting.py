"""Waiting on something another thread or process does, with a deadline.

Where the code under test offers an event (``Script.wait_for``, a thread's ``join``) tests
wait on that; ``wait_until`` is for state only visible by looking (a socket that answers, a
counter another thread bumps, a row in PostgreSQL). It returns as soon as the condition holds,
so its short interval costs nothing when things are quick, and it fails with ``message`` at
the deadline instead of hanging until pytest-timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T], timeout_s: float = 10.0, *, interval_s: float = 0.02, message=""
) -> T:
    """``condition()``'s first truthy value; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(message or f"not within {timeout_s} s: {condition!r}")
        time.sleep(interval_s)


def wait_for_value(check: Callable[[], object], expected: object, timeout_s: float = 10.0):
    """Until ``check()`` returns ``expected``; the failure shows the last value seen."""
    seen: list[object] = []

    def holds() -> bool:
        seen[:] = [check()]
        return seen[0] == expected

    try:
        wait_until(holds, timeout_s)
    except AssertionError:
        raise AssertionError(f"still {seen[0]!r}, expected {expected!r}") from None
