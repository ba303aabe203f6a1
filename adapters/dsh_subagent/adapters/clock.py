"""The adapters' one wall clock.

Theory of operation
-------------------
1. ``epoch_ms()`` is whole milliseconds since the epoch, the unit of ``createdAt`` and of
   event ``time``. The core never reads a clock; adapters pass this function (or a test's
   clock) wherever a time is stamped.
2. The events stamped within one millisecond share one float: the last value is handed out
   again while the millisecond has not changed (a log holds a time per event; most of a
   burst's events fall in the same millisecond).
"""

from __future__ import annotations

import time

# The last millisecond read and its float, swapped as one pair (rule 2).
_last: list[tuple[int, float]] = [(0, 0.0)]


def epoch_ms() -> float:
    """Whole milliseconds since the epoch, as a float (the default clock)."""
    ms = time.time_ns() // 1_000_000
    last = _last[0]
    if ms != last[0]:
        last = _last[0] = (ms, float(ms))
    return last[1]


__all__ = ["epoch_ms"]
