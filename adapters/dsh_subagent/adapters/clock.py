"""The adapters' one wall clock.

Theory of operation
-------------------
1. ``epoch_ms()`` is whole milliseconds since the epoch, the unit of ``createdAt`` and of
   event ``time``. The core never reads a clock; adapters pass this function (or a test's
   clock) wherever a time is stamped.
"""

from __future__ import annotations

import time


def epoch_ms() -> float:
    """Whole milliseconds since the epoch, as a float (the default clock)."""
    return float(time.time_ns() // 1_000_000)


__all__ = ["epoch_ms"]
