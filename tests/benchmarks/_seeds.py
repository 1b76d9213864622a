"""What every learning benchmark prints after its seeds: each figure's mean and spread."""

from __future__ import annotations

import numpy as np


def spread(name: str, values: list[float], fmt: str = "{:.1f}") -> str:
    """``name: mean M (std S, min A, max B) over N seeds``."""
    v = np.asarray(values, dtype=np.float64)
    return (f"{name}: mean {fmt.format(v.mean())} (std {fmt.format(v.std())}, min "
            f"{fmt.format(v.min())}, max {fmt.format(v.max())}) over {len(v)} seed"
            f"{'s' if len(v) != 1 else ''}")
