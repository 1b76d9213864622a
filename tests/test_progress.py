"""The progress line: one full line per tenth of the way in logs, and rates that stay readable."""

from __future__ import annotations

import io
import itertools
import types

import muzero_gym.progress as progress
from muzero_gym.progress import Progress, rate_text


def test_rate_text_reads_for_fast_and_slow_work():
    assert rate_text(12_345, 10.0, "env steps") == "1,234 env steps/s"
    assert rate_text(25, 10.0, "games") == "2.5 games/s"
    assert rate_text(4, 180.0, "games") == "45 s/game"
    assert rate_text(0, 5.0, "games") == "0 games/s"


def test_log_lines_come_once_per_tenth_with_the_rate(monkeypatch):
    clock = itertools.count(0.0, 30.0)  # the bar's start, then one update every 30 s
    # the progress module alone sees the fake clock, not the rest of the process
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    stream = io.StringIO()
    bar = Progress(40, "games", stream=stream)
    for count in range(1, 41):
        bar.update(count, won=count)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10
    assert lines[0].startswith("[##......................] 4/40 games | won 4 | ")
    assert lines[-1].startswith("[########################] 40/40 games | won 40 | ")
    # a game every 30 s of the fake clock
    assert lines[-1].endswith("| 30 s/game")
