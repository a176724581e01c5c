"""livekit's embedded Silero VAD as the lab runs it: hearing the caller's voice, not the marks.

The lab stamps a marker on every 10 ms frame of the caller's speech for its scripted STT (see
:mod:`.audio`). Silero hears the marker's magic sample as a click train: on the lab's
``table_for_two`` recording it took the marked speech for less speech than the voice alone
(a turn started 0.13 s late) and marked silence for some (a turn ended 0.13 s late). A production
VAD hears the voice alone, so the lab's Silero does too: :class:`UnmarkedSileroVAD` takes the
markers out of each frame (:func:`~.audio.unmarked_frame`) before livekit's model hears it; the
STT still gets the marked frames.
"""

from __future__ import annotations

import asyncio
import contextlib

from livekit import rtc
from livekit.agents import inference, vad
from typing_extensions import override

from .audio import unmarked_frame

__all__ = ["UnmarkedSileroVAD"]


class UnmarkedSileroVAD(vad.VAD):
    """livekit's embedded Silero VAD (``inference.VAD``) fed the frames without markers.

    Args:
        min_silence_duration: Seconds of silence before END_OF_SPEECH.
    """

    def __init__(self, *, min_silence_duration: float) -> None:
        self._silero = inference.VAD(min_silence_duration=min_silence_duration)
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
        return _UnmarkedStream(self, self._silero.stream())


class _UnmarkedStream(vad.VADStream):
    """Frames in without markers to Silero's stream; its events out as they come."""

    def __init__(self, owner: UnmarkedSileroVAD, silero: vad.VADStream) -> None:
        self._silero = silero
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
            events.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await events
            await self._silero.aclose()

    async def _forward_events(self) -> None:
        async for event in self._silero:
            self._event_ch.send_nowait(event)
