"""The one clock of the first-party middleware: the running loop's time."""

from __future__ import annotations

import asyncio
import time

__all__ = ["loop_now", "on_loop_clock"]


def loop_now() -> float:
    """The running loop's time: the clock the shared audio observer stamps frames with.

    Loop time, not wall time: the lab runs calls on a virtual clock, and every timing the
    middleware compare (frames, transcripts, speech windows, stalls) is stamped with it.
    """
    return asyncio.get_running_loop().time()


def on_loop_clock(wall_time: float) -> float:
    """``wall_time`` (a ``time.time()`` stamp, as livekit's and the state's are) in loop time."""
    return loop_now() - (time.time() - wall_time)
