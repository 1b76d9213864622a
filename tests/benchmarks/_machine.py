"""The machine a benchmark ran on, named as its figures should be reported: the CPU model."""

from __future__ import annotations

import platform


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux; the platform's processor string or
    architecture elsewhere), e.g. ``AMD EPYC 7B13``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
