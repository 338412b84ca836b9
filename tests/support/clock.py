"""A clock a test sets by hand, for the stores and backends that take one."""

from __future__ import annotations

from datetime import datetime


class Clock:
    """Returns ``now`` until the test moves it."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now
