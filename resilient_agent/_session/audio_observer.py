"""The wrapping observer: the fallback for an audio input whose class cannot be swapped.

:class:`~resilient_agent._session.session_audio.SessionAudio` observes the session's audio input in
place (the input stays the app's object). An input it cannot observe that way (a class that
refuses ``__class__`` assignment or subclassing, an ``__aiter__`` that returns another iterator)
gets an :class:`AudioObserver` chained in front of it instead, with ``AudioInput(source=)``
exactly as livekit's own recorder chains it when a session records: ``session.input.audio`` is
then the observer, its ``source`` is the app's input, and attributes the observer does not have
are read from the app's input.
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

from .._engine.audio import FrameCallback

__all__ = ["AudioObserver", "FrameCallback"]


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
        # bound once: this runs for every 10-50 ms frame of the call; through __aiter__, as
        # livekit's own `async for` reads an input
        self._next_frame = aiter(source).__anext__

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
