"""The one clock of the first-party middleware: the running loop's time."""

from __future__ import annotations

import asyncio

__all__ = ["loop_now"]


def loop_now() -> float:
    """The running loop's time: the clock the shared audio observer stamps frames with.

    Loop time, not wall time: the lab runs calls on a virtual clock, and every timing the
    middleware compare (frames, transcripts, speech windows, stalls) is stamped with it.
    """
    return asyncio.get_running_loop().time()
