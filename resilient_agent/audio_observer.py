"""One tap on the caller's audio, shared by every middleware that needs to see it.

Middleware that watch the caller's audio (the turn keeper's buffer, the watchdog's level meter)
register a synchronous callback through ``MiddlewareContext.observe_audio``; the bridge then puts
a single :class:`AudioObserver` in front of the session's audio input (the ``AudioInput(source=)``
chaining livekit's own recorder uses), so each frame pays for one extra hop, not one per
middleware.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from livekit import rtc
from livekit.agents.voice.io import AudioInput
from typing_extensions import override

__all__ = ["AudioObserver", "FrameCallback"]

FrameCallback = Callable[[rtc.AudioFrame, float], None]
"""Called with each frame of caller audio and the loop time it passed at."""


class AudioObserver(AudioInput):
    """Passes the caller's audio through unchanged and shows each frame to the callbacks."""

    def __init__(self, source: AudioInput) -> None:
        super().__init__(label="ResilientAgentAudioObserver", source=source)
        self.callbacks: list[FrameCallback] = []
        self._time: Callable[[], float] | None = None
        # bound once: this runs for every 10-20 ms frame of the call
        self._next_frame = source.__anext__

    @override
    async def __anext__(self) -> rtc.AudioFrame:
        frame = await self._next_frame()
        if self._time is None:
            self._time = asyncio.get_running_loop().time
        now = self._time()
        for callback in self.callbacks:
            callback(frame, now)
        return frame
