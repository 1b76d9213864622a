"""A dependency-free progress line for long work (training, evaluation).

On a terminal it redraws one line at most a few times per second; elsewhere (CI, log files) it
prints a full line at every tenth of the way, so logs stay short.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``Progress(total, unit)``; call :meth:`update` with the current count and extra fields."""

    def __init__(self, total: int, unit: str, initial: int = 0, enabled: bool = True,
                 stream: TextIO | None = None):
        self.total = max(1, int(total))
        self.unit = unit
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty()
        self.start_time = time.monotonic()
        self.start_count = initial
        self._last_draw = 0.0
        self._last_decile = initial * 10 // self.total
        self._drew = False

    def update(self, count: int, **fields: object) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        decile = count * 10 // self.total
        if self.interactive:
            if now - self._last_draw < 0.25 and count < self.total:
                return
        elif decile == self._last_decile and count < self.total:
            return
        self._last_draw = now
        self._last_decile = decile
        rate = (count - self.start_count) / max(now - self.start_time, 1e-9)
        width = 24
        filled = min(width, count * width // self.total)
        extra = "".join(f" | {k.replace('_', ' ')} {v}" for k, v in fields.items())
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {count:,}/{self.total:,} {self.unit}"
                f"{extra} | {rate:,.0f} {self.unit}/s")
        if self.interactive:
            self.stream.write("\r" + line + "\033[K")
            self._drew = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.interactive and self._drew:
            self.stream.write("\n")
            self.stream.flush()
