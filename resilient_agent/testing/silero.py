"""livekit's embedded Silero VAD as the lab runs it: hearing the caller's voice, not the marks.

The lab stamps a marker on every 10 ms frame of the caller's speech for its scripted STT (see
:mod:`.audio`). Silero hears the marker's magic sample as a click train: on the lab's
``table_for_two`` recording it took the marked speech for less speech than the voice alone
(a turn started 0.13 s late) and marked silence for some (a turn ended 0.13 s late). A production
VAD hears the voice alone, so the lab's Silero does too: :class:`UnmarkedSileroVAD` takes the
markers out of each frame (:func:`~.audio.unmarked_frame`) before livekit's model hears it; the
STT still gets the marked frames.

A replay's Silero can follow the recorded call's turn ends where they are a window or two off
(``recorded_ends``: see :mod:`.silero_edges`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from livekit import rtc
from livekit.agents import inference, vad
from typing_extensions import override

from .audio import unmarked_frame
from .silero_edges import (
    ACTIVATION_THRESHOLD,
    DEACTIVATION_THRESHOLD,
    EdgeFollower,
    FollowedEdge,
)

__all__ = ["UnmarkedSileroVAD"]


class UnmarkedSileroVAD(vad.VAD):
    """livekit's embedded Silero VAD (``inference.VAD``) fed the frames without markers.

    Args:
        min_silence_duration: Seconds of silence before END_OF_SPEECH.
        recorded_ends: A replay's recorded turn ends (call seconds) its turn ends follow
            within two windows (:class:`~.silero_edges.EdgeFollower`); empty: none.
        clock: Call seconds now; required with ``recorded_ends``.
    """

    def __init__(
        self,
        *,
        min_silence_duration: float,
        recorded_ends: Sequence[float] = (),
        clock: Callable[[], float] | None = None,
    ) -> None:
        # livekit's defaults, given so the edge follower knows what Silero hears as speech
        self._silero = inference.VAD(
            min_silence_duration=min_silence_duration,
            activation_threshold=ACTIVATION_THRESHOLD,
            deactivation_threshold=DEACTIVATION_THRESHOLD,
        )
        if recorded_ends and clock is None:
            raise ValueError("recorded_ends needs the call's clock")
        self._min_silence = min_silence_duration
        self._recorded_ends = tuple(recorded_ends)
        self._clock = clock
        self.followed: list[FollowedEdge] = []
        """The turn ends taken from the recording's report, in order."""
        super().__init__(capabilities=self._silero.capabilities)

    @property
    @override
    def model(self) -> str:
        return self._silero.model

    @property
    @override
    def provider(self) -> str:
        return self._silero.provider

    @property
    def min_silence_duration(self) -> float | None:
        """Seconds of silence before END_OF_SPEECH (livekit's turn detector reads it)."""
        return self._silero.min_silence_duration

    @override
    def stream(self) -> vad.VADStream:
        follower = None
        if self._recorded_ends and self._clock is not None:
            follower = EdgeFollower(self._recorded_ends, min_silence_duration=self._min_silence)
            follower.followed = self.followed
        return _UnmarkedStream(self, self._silero.stream(), follower, self._clock)


class _UnmarkedStream(vad.VADStream):
    """Frames in without markers to Silero's stream; its events out as they come."""

    def __init__(
        self,
        owner: UnmarkedSileroVAD,
        silero: vad.VADStream,
        follower: EdgeFollower | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._silero = silero
        self._follower = follower
        self._clock = clock
        self._release: asyncio.TimerHandle | None = None
        super().__init__(owner)

    async def _main_task(self) -> None:
        events = asyncio.create_task(self._forward_events())
        try:
            async for item in self._input_ch:
                if isinstance(item, rtc.AudioFrame):
                    self._silero.push_frame(unmarked_frame(item))
                else:
                    self._silero.flush()
            self._silero.end_input()
            await events
        finally:
            if self._release is not None:
                self._release.cancel()
            events.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await events
            await self._silero.aclose()

    async def _forward_events(self) -> None:
        async for event in self._silero:
            if self._follower is None or self._clock is None:
                self._event_ch.send_nowait(event)
                continue
            for sent in self._follower.on_event(event, self._clock()):
                self._event_ch.send_nowait(sent)
            self._schedule_release()

    def _schedule_release(self) -> None:
        """Send a held end at its time (on the call's clock)."""
        assert self._follower is not None and self._clock is not None
        if self._release is not None:
            self._release.cancel()
            self._release = None
        due = self._follower.due()
        if due is not None:
            delay = max(0.0, due - self._clock())
            self._release = asyncio.get_running_loop().call_later(delay, self._send_due)

    def _send_due(self) -> None:
        assert self._follower is not None and self._clock is not None
        self._release = None
        for sent in self._follower.release_due(self._clock()):
            self._event_ch.send_nowait(sent)
