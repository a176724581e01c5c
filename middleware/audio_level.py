"""How loud the caller's line is: one meter per session, shared by every middleware.

The first middleware that asks (:meth:`AudioLevelMeter.of`) gets the session's meter, kept in
the session's context (``ctx.shared``) across handoffs; the others get the same instance, so each
frame of caller audio is looked at once, whatever the number of
readers. The meter is shown the caller's audio (through the chain's audio observer) only while
some reader wants it (:meth:`AudioLevelMeter.want`), measures at most every 50 ms, and never
copies or keeps a frame.
"""

from __future__ import annotations

from collections.abc import Callable

from livekit import rtc

from resilient_agent import MiddlewareContext, frame_mean_square

__all__ = ["MIN_VOICE_RMS", "QUIET_BELOW_PEAK", "AudioLevelMeter"]

# Below this int16 RMS (about -64 dBFS) a line carries no voice, whatever its gain.
MIN_VOICE_RMS = 20.0
# Within a turn, audio this far below the loudest voice heard (-26 dB) counts as quiet: a caller's
# level varies far less than that while they talk, and a line's background sits well below it.
QUIET_BELOW_PEAK = 1 / 20
# Against quiet periods of a second or more, a look every 50 ms is plenty.
_MEASURE_EVERY_S = 0.05


class AudioLevelMeter:
    """Measures the caller's audio (fed by the observer) while a reader wants it.

    Two readings: :meth:`loud_at`, the last time the line was louder than an absolute floor; and,
    within the current turn (:meth:`start_turn`), whether a voice was heard at all
    (:attr:`voice_heard`) and since when the line has been quiet relative to it
    (:attr:`quiet_since`). The relative reading works at any line gain; a line that never carried
    a voice (frames of zeros, no frames at all) gives no reading, never "quiet".
    """

    def __init__(self, *, floor_rms: float = 300.0) -> None:
        self._floors: dict[float, float] = {}
        self._measured_at = float("-inf")
        self._wanted_by: set[str] = set()
        self._quiet_listeners: list[Callable[[], None]] = []
        self.metering = False
        self.turn_peak = 0.0
        self.quiet_since: float | None = None
        self.track_floor(floor_rms)
        self._default_floor = floor_rms
        # the session's context (the meter lives in it, and no longer than the session)
        self._ctx: MiddlewareContext | None = None

    @classmethod
    def of(cls, ctx: MiddlewareContext) -> AudioLevelMeter | None:
        """The session's shared meter; None when the session has no audio input."""

        def build() -> AudioLevelMeter | None:
            meter = cls()
            if not ctx.observe_audio(meter.on_frame):
                return None
            # shown frames only while a reader wants it: a call is mostly not metered
            ctx.stop_observing_audio(meter.on_frame)
            meter._ctx = ctx
            return meter

        return ctx.shared("AudioLevelMeter", build)

    def want(self, reader: str, wanted: bool) -> None:
        """Start or stop measuring on ``reader``'s behalf (it measures while anyone wants it)."""
        if wanted:
            self._wanted_by.add(reader)
        else:
            self._wanted_by.discard(reader)
        metering = bool(self._wanted_by)
        ctx = self._ctx
        if metering != self.metering and ctx is not None:
            if metering:
                ctx.observe_audio(self.on_frame)
            else:
                ctx.stop_observing_audio(self.on_frame)
        self.metering = metering

    def notify_quiet(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever :attr:`quiet_since` is set (the line went quiet)."""
        self._quiet_listeners.append(listener)

    def stop_notifying_quiet(self, listener: Callable[[], None]) -> None:
        """Stop calling ``listener`` (see :meth:`notify_quiet`)."""
        if listener in self._quiet_listeners:
            self._quiet_listeners.remove(listener)

    def track_floor(self, floor_rms: float) -> None:
        """Also note when the line was last louder than ``floor_rms`` (see :meth:`loud_at`)."""
        self._floors.setdefault(floor_rms, 0.0)

    def loud_at(self, floor_rms: float) -> float:
        """The last loop time the line was louder than ``floor_rms`` (0.0 if never)."""
        return self._floors.get(floor_rms, 0.0)

    @property
    def last_loud_at(self) -> float:
        """The last time the line was louder than the floor given at construction."""
        return self.loud_at(self._default_floor)

    def start_turn(self) -> None:
        """Forget the previous turn's readings."""
        self.turn_peak = 0.0
        self.quiet_since = None

    @property
    def voice_heard(self) -> bool:
        """Whether this turn's audio carried a voice at all."""
        return self.turn_peak >= MIN_VOICE_RMS

    def on_frame(self, frame: rtc.AudioFrame, now: float) -> None:
        """Measure a frame now and then, only while a reader wants it."""
        if not self.metering or now - self._measured_at < _MEASURE_EVERY_S:
            return
        self._measured_at = now
        level = frame_mean_square(frame)
        if level is None:
            return
        for floor in self._floors:
            if level > floor * floor:
                self._floors[floor] = now
        rms = level**0.5
        # as max() twice and voice_heard, without the calls: this runs for every frame metered
        peak = self.turn_peak
        if rms > peak:
            peak = self.turn_peak = rms
        quiet_below = peak * QUIET_BELOW_PEAK
        if rms >= (quiet_below if quiet_below > MIN_VOICE_RMS else MIN_VOICE_RMS):
            self.quiet_since = None
        elif self.quiet_since is None and peak >= MIN_VOICE_RMS:
            self.quiet_since = now
            for listener in self._quiet_listeners:
                listener()
