"""How loud a frame of audio is: the one measurement every level reading of the library makes.

The caller's line level (the first-party ``AudioLevelMeter``), a realtime model's caller voice
and the agent's synthesized replies are measured here, on every frame they look at: the
cheapest form of it is kept in one place. The samples are read as the frame holds them
(:func:`~resilient_agent._livekit.compat.frame_buffer`), not through ``frame.data``'s views.
"""

from __future__ import annotations

import numpy as np
from livekit import rtc

from .._livekit.compat import frame_buffer

__all__ = ["frame_mean_square"]

# numpy's dtypes as objects and its function as a global: given a type (np.int16) numpy looks
# its dtype up at every call, and numpy's module ``__getattr__`` keeps CPython from specializing
# np.<name> lookups
_INT16 = np.dtype(np.int16)
_FLOAT32 = np.dtype(np.float32)
_frombuffer = np.frombuffer


def frame_mean_square(frame: rtc.AudioFrame) -> float | None:
    """The mean of the squares of ``frame``'s int16 samples; None for a frame without any.

    Its square root is the frame's RMS; compare the mean square with a squared level to save the
    root.
    """
    samples = _frombuffer(frame_buffer(frame), _INT16).astype(_FLOAT32)
    count = len(samples)  # the array's size: len() is a call CPython makes directly, .size is not
    if not count:
        return None
    # the array's own dot: np.dot's, without the module function's dispatch in Python
    return float(samples.dot(samples)) / count
