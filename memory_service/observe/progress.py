"""Progress: a tqdm bar on a terminal, a log line every so often anywhere else (CI logs)."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import TextIO

log = logging.getLogger("memory_service.observe.progress")


class Progress:
    """Counts steps toward ``total``; ``stage`` names what is being done now."""

    def __init__(
        self,
        total: int,
        description: str,
        *,
        stream: TextIO | None = None,
        every_s: float = 15.0,
        enabled: bool = True,
    ) -> None:
        stream = stream or sys.stderr
        self.total = max(0, total)
        self.description = description
        self.done = 0
        self._stage = ""
        self._every = every_s
        self._last = time.monotonic()
        self._bar = None
        self._enabled = enabled
        if enabled and stream.isatty():
            from tqdm import tqdm

            sized = _has_width(stream)  # a pty without a size (CI, `script`) reports 0 columns
            self._bar = tqdm(
                total=self.total,
                desc=description,
                file=stream,
                dynamic_ncols=sized,
                ncols=None if sized else 100,
                nrows=None if sized else 40,  # tqdm hides bars past row 0 of a 0-row pty
            )

    def stage(self, name: str) -> None:
        self._stage = name
        if self._bar is not None:
            self._bar.set_postfix_str(name, refresh=False)

    def update(self, steps: int = 1) -> None:
        self.done += steps
        if self._bar is not None:
            self._bar.update(steps)
        elif self._enabled and time.monotonic() - self._last >= self._every:
            self._last = time.monotonic()
            self._log()

    def _log(self) -> None:
        share = 100.0 * self.done / self.total if self.total else 100.0
        log.info(
            "%s: %d/%d (%.0f%%) %s", self.description, self.done, self.total, share, self._stage
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._enabled:
            self._log()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _has_width(stream: TextIO) -> bool:
    try:
        return os.get_terminal_size(stream.fileno()).columns > 0
    except (OSError, ValueError):
        return False
