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
        width = 24
        filled = min(width, count * width // self.total)
        extra = "".join(f" | {k.replace('_', ' ')} {v}" for k, v in fields.items())
        rate = rate_text(count - self.start_count, now - self.start_time, self.unit)
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {count:,}/{self.total:,} {self.unit}"
                f"{extra} | {rate}")
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


def rate_text(done: int, seconds: float, unit: str) -> str:
    """How fast the work goes: ``1,234 env steps/s``, ``2.5 games/s``, or, below one a second,
    the seconds each takes (``45 s/game``), so that slow work does not read ``0 games/s``."""
    rate = done / max(seconds, 1e-9)
    if done == 0 or rate >= 10:
        return f"{rate:,.0f} {unit}/s"
    if rate >= 1:
        return f"{rate:.1f} {unit}/s"
    singular = unit[:-1] if unit.endswith("s") else unit
    return f"{seconds / done:,.0f} s/{singular}"
