"""When a realtime model's audio stream for each reply ended.

livekit-plugins-google ends a reply's audio stream on the server's ``generationComplete``, or
when its socket goes (a ``1011`` close, a dropped socket) with the reply half sent: the stream
ends the same way either way, and only its time tells them apart (at the model's error, or
before it). The session's runtime runs the agent's ``realtime_audio_output_node`` on the
model's stream through :meth:`ModelAudio.observe` once a middleware asked for the session's
``ModelAudio`` (:meth:`ModelAudio.of`): the stream is read as the model sends it (livekit's
output takes frames only as fast as they play) and the loop time it ran out is noted under the
speech it was made for. The frames pass on unchanged, in order; nothing is noted otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from livekit import rtc

from .._engine.state import MiddlewareContext

__all__ = ["ModelAudio", "RealtimeAudioNode"]

RealtimeAudioNode = Callable[[AsyncIterable[rtc.AudioFrame], Any], Any]
"""An agent's ``realtime_audio_output_node``: frames in, an async iterable (or a coroutine) out."""

_KEY = "resilient_agent.model_audio"


class ModelAudio:
    """The loop times a realtime model's audio streams ran out, by speech."""

    def __init__(self) -> None:
        self._ended_at: dict[str, float] = {}

    @classmethod
    def of(cls, ctx: MiddlewareContext) -> ModelAudio:
        """The session's ``ModelAudio``: from now on the model's audio streams are noted."""
        found = ctx.shared(_KEY, cls)
        assert found is not None
        return found

    @classmethod
    def wanted(cls, ctx: MiddlewareContext) -> ModelAudio | None:
        """The session's ``ModelAudio`` if a middleware asked for it, else None."""
        return ctx.shared(_KEY, lambda: None)

    def take(self, speech_id: str) -> float | None:
        """The loop time the stream of ``speech_id`` ran out (None: not yet, or not seen)."""
        return self._ended_at.pop(speech_id, None)

    def observe(
        self,
        speech_id: str | None,
        node: RealtimeAudioNode,
        audio: AsyncIterable[rtc.AudioFrame],
        model_settings: Any,
    ) -> Any:
        """Run ``node`` on the model's ``audio``, noting when that stream ran out."""
        if speech_id is None:
            return node(audio, model_settings)
        return node(self._noted(speech_id, audio), model_settings)

    async def _noted(
        self, speech_id: str, audio: AsyncIterable[rtc.AudioFrame]
    ) -> AsyncIterator[rtc.AudioFrame]:
        # the model's stream is read as it comes, not at the playout's pace (livekit's output
        # takes frames only as fast as it plays them): its end is noted when the model ends it
        relay: asyncio.Queue[rtc.AudioFrame | None] = asyncio.Queue()
        failure: list[BaseException] = []

        async def read() -> None:
            try:
                async for frame in audio:
                    relay.put_nowait(frame)
                self._ended_at[speech_id] = asyncio.get_running_loop().time()
            except Exception as exc:  # the consumer sees the model's error, as without the relay
                failure.append(exc)
            finally:
                relay.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read(), name="resilient_agent.model_audio")
        try:
            while (frame := await relay.get()) is not None:
                yield frame
            if failure:
                raise failure[0]
        finally:
            reader.cancel()
