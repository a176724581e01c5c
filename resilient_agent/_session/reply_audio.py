"""What the agent's TTS made of each speech: how much audio, and whether any of it was loud.

livekit records a reply as said once its text went to the TTS: a synthesis that ends without a
frame (livekit retries it three times, then gives the reply up with no assistant message), or
one that returns digital silence (played, and recorded as said in full), leaves the caller with
nothing, and no event says so. The session's runtime runs the agent's ``tts_node`` through
:meth:`ReplyAudio.observe` once a middleware asked for the session's ``ReplyAudio``
(:meth:`ReplyAudio.of`): each synthesis is noted under the speech playing or being prepared
when it began, with its text and what came out. Nothing is measured otherwise; once a frame was
loud, the synthesis's later frames are passed on unmeasured.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from livekit import rtc

from .._engine.state import MiddlewareContext
from .loudness import frame_mean_square

__all__ = ["MIN_AUDIBLE_RMS", "ReplyAudio", "Synthesis", "TtsNode"]

TtsNode = Callable[[AsyncIterable[str], Any], Any]
"""An agent's ``tts_node``: an async iterable of frames, or a coroutine giving one (or None)."""

MIN_AUDIBLE_RMS = 20.0
"""Below this int16 RMS (about -64 dBFS) a frame carries nothing a caller hears."""

_KEY = "resilient_agent.reply_audio"


@dataclass
class Synthesis:
    """One run of the agent's ``tts_node``.

    Attributes:
        speech_id: The speech it was made for, if one was known when it began.
        text: The text it was given (so far).
        audio_s: Seconds of audio it gave.
        audible: Whether any frame was louder than :data:`MIN_AUDIBLE_RMS`.
        outcome: ``running``; ``finished`` (its frames ran out); ``failed`` (it raised, as
            livekit's TTS does once its retries are spent); ``stopped`` (it was closed before
            the end: an interruption).
    """

    speech_id: str | None
    text: str = ""
    audio_s: float = 0.0
    audible: bool = False
    outcome: Literal["running", "finished", "failed", "stopped"] = "running"

    @property
    def silent(self) -> bool:
        """It ended (finished or failed) with text to say and nothing audible."""
        return (
            self.outcome in ("finished", "failed")
            and bool(self.text.strip())
            and not (self.audible)
        )


class ReplyAudio:
    """The syntheses of one session, by speech."""

    def __init__(self) -> None:
        self._by_speech: dict[str, list[Synthesis]] = {}

    @classmethod
    def of(cls, ctx: MiddlewareContext) -> ReplyAudio:
        """The session's ``ReplyAudio``: from now on the agent's syntheses are noted."""
        found = ctx.shared(_KEY, cls)
        assert found is not None
        return found

    @classmethod
    def wanted(cls, ctx: MiddlewareContext) -> ReplyAudio | None:
        """The session's ``ReplyAudio`` if a middleware asked for it, else None."""
        return ctx.shared(_KEY, lambda: None)

    def take(self, speech_id: str) -> list[Synthesis]:
        """The syntheses made for ``speech_id``, forgotten from now on."""
        return self._by_speech.pop(speech_id, [])

    def observe(
        self,
        speech_id: str | None,
        node: TtsNode,
        text: AsyncIterable[str],
        model_settings: Any,
    ) -> AsyncIterator[rtc.AudioFrame]:
        """Run ``node`` on ``text``, noting what it makes; its frames pass through unchanged."""
        synthesis = Synthesis(speech_id)
        if speech_id is not None:
            self._by_speech.setdefault(speech_id, []).append(synthesis)
        return _observed(synthesis, node, text, model_settings)


async def _noted_text(synthesis: Synthesis, text: AsyncIterable[str]) -> AsyncIterator[str]:
    async for chunk in text:
        synthesis.text += chunk
        yield chunk


async def _observed(
    synthesis: Synthesis, node: TtsNode, text: AsyncIterable[str], model_settings: Any
) -> AsyncIterator[rtc.AudioFrame]:
    made = node(_noted_text(synthesis, text), model_settings)
    try:
        if inspect.isawaitable(made):
            made = await _awaited(made)
        if made is not None:
            async for frame in made:
                synthesis.audio_s += frame.samples_per_channel / frame.sample_rate
                if not synthesis.audible and _rms(frame) > MIN_AUDIBLE_RMS:
                    synthesis.audible = True
                yield frame
    except (GeneratorExit, asyncio.CancelledError):
        synthesis.outcome = "stopped"
        raise
    except BaseException:
        synthesis.outcome = "failed"
        raise
    synthesis.outcome = "finished"


async def _awaited(made: Awaitable[Any]) -> Any:
    return await made


def _rms(frame: rtc.AudioFrame) -> float:
    level = frame_mean_square(frame)
    return 0.0 if level is None else level**0.5
