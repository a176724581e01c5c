"""How loud the caller's line is: one piece of the watchdog's evidence."""

from __future__ import annotations

import numpy as np
from livekit import rtc

__all__ = ["AudioLevelMeter"]


class AudioLevelMeter:
    """Remembers when the caller's audio was last louder than a floor (fed by the observer)."""

    def __init__(self, *, floor_rms: float) -> None:
        self._floor_sum_squares = floor_rms * floor_rms
        self._measured_at = float("-inf")
        self.last_loud_at = 0.0
        self.metering = False

    def on_frame(self, frame: rtc.AudioFrame, now: float) -> None:
        """Measure a frame now and then, only while the caller shows as speaking."""
        # against a quiet period of seconds, a look every 50 ms is plenty
        if not self.metering or now - self._measured_at < 0.05:
            return
        self._measured_at = now
        samples = np.frombuffer(frame.data, dtype=np.int16).astype(np.float32)
        if (
            samples.size
            and float(np.dot(samples, samples)) > self._floor_sum_squares * samples.size
        ):
            self.last_loud_at = now
