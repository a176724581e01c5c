"""How loud the caller's line is: one piece of the watchdog's evidence."""

from __future__ import annotations

import numpy as np
from livekit import rtc

__all__ = ["AudioLevelMeter"]

# Below this int16 RMS (about -64 dBFS) a line carries no voice, whatever its gain.
MIN_VOICE_RMS = 20.0
# Within a turn, audio this far below the loudest voice heard (-26 dB) counts as quiet: a caller's
# level varies far less than that while they talk, and a line's background sits well below it.
QUIET_BELOW_PEAK = 1 / 20
# Against quiet periods of a second or more, a look every 50 ms is plenty.
_MEASURE_EVERY_S = 0.05


class AudioLevelMeter:
    """Measures the caller's audio (fed by the observer) while they show as speaking.

    Two readings: :attr:`last_loud_at`, the last time the line was louder than an absolute
    ``floor_rms``; and, within the current turn (:meth:`start_turn`), whether a voice was heard at
    all (:attr:`voice_heard`) and since when the line has been quiet relative to it
    (:attr:`quiet_since`). The relative reading works at any line gain; a line that never carried a
    voice (frames of zeros, no frames at all) gives no reading, never "quiet".
    """

    def __init__(self, *, floor_rms: float) -> None:
        self._floor_sum_squares = floor_rms * floor_rms
        self._measured_at = float("-inf")
        self.last_loud_at = 0.0
        self.metering = False
        self.turn_peak = 0.0
        self.quiet_since: float | None = None

    def start_turn(self) -> None:
        """Forget the previous turn's readings."""
        self.turn_peak = 0.0
        self.quiet_since = None

    @property
    def voice_heard(self) -> bool:
        """Whether this turn's audio carried a voice at all."""
        return self.turn_peak >= MIN_VOICE_RMS

    def on_frame(self, frame: rtc.AudioFrame, now: float) -> None:
        """Measure a frame now and then, only while the caller shows as speaking."""
        if not self.metering or now - self._measured_at < _MEASURE_EVERY_S:
            return
        self._measured_at = now
        samples = np.frombuffer(frame.data, dtype=np.int16).astype(np.float32)
        if not samples.size:
            return
        sum_squares = float(np.dot(samples, samples))
        if sum_squares > self._floor_sum_squares * samples.size:
            self.last_loud_at = now
        rms = (sum_squares / samples.size) ** 0.5
        self.turn_peak = max(self.turn_peak, rms)
        if rms >= max(MIN_VOICE_RMS, self.turn_peak * QUIET_BELOW_PEAK):
            self.quiet_since = None
        elif self.quiet_since is None and self.voice_heard:
            self.quiet_since = now
