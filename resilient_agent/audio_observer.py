"""One tap on the caller's audio, shared by every middleware that needs to see it.

Middleware that watch the caller's audio (the turn keeper's buffer, the watchdog's level meter)
register a synchronous callback through ``MiddlewareContext.observe_audio``. Only then does the
bridge put a single :class:`AudioObserver` in front of the session's audio input, chained with
``AudioInput(source=)`` exactly as livekit's own recorder chains it when a session records, so
each frame pays for one extra hop, not one per middleware; with no such middleware nothing is
wrapped and no frame is touched.

livekit's public observation points cannot replace it: ``Agent.stt_node`` receives silence in
place of the caller's audio while a protected speech plays (which is when the middleware must
hear the caller), and the VAD is the app's object. What stays visible to the app (see
docs/middleware.md): ``session.input.audio`` is the observer, its ``source`` is the app's input,
attributes the observer does not have are read from the app's input, and when the app replaces
the input later the new one is observed the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from livekit import rtc
from livekit.agents.voice.io import AudioInput
from typing_extensions import override

__all__ = ["AudioObserver", "FrameCallback"]

FrameCallback = Callable[[rtc.AudioFrame, float], None]
"""Called with each frame of caller audio and the loop time it passed at."""


class AudioObserver(AudioInput):
    """Passes the caller's audio through unchanged and shows each frame to the callbacks.

    Args:
        source: The app's audio input.
        on_swapped: Called soon after livekit detaches the observer (the input was replaced,
            or audio was disabled), so the owner can follow a replacement.
    """

    def __init__(self, source: AudioInput, *, on_swapped: Callable[[], None] | None = None) -> None:
        super().__init__(label=source.label, source=source)
        self.callbacks: list[FrameCallback] = []
        self._on_swapped = on_swapped
        self._time: Callable[[], float] | None = None
        # bound once: this runs for every 10-20 ms frame of the call
        self._next_frame = source.__anext__

    @override
    async def __anext__(self) -> rtc.AudioFrame:
        frame = await self._next_frame()
        if self._time is None:
            self._time = _loop_clock(asyncio.get_running_loop())
        now = self._time()
        for callback in self.callbacks:
            callback(frame, now)
        return frame

    @override
    def on_detached(self) -> None:
        super().on_detached()
        if self._on_swapped is not None:
            # livekit detaches the old input before it stores the new one: look once it did
            with contextlib.suppress(RuntimeError):  # no loop: nothing is running to follow
                asyncio.get_running_loop().call_soon(self._on_swapped)

    def __getattr__(self, name: str) -> Any:
        # only called for attributes the observer lacks: the app's own input answers them
        if name.startswith("__") or name in ("_next_frame", "_on_swapped", "_time", "callbacks"):
            raise AttributeError(name)
        return getattr(self.source, name)


def _loop_clock(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """``loop.time`` as a direct call when it can be one: it is read for every frame.

    asyncio's own loops read ``time.monotonic()`` through a Python method; a loop with a clock of
    its own (uvloop, the lab's virtual time) is asked as it is.
    """
    if type(loop).time is asyncio.BaseEventLoop.time:
        return time.monotonic
    return loop.time
