"""Recovering words livekit never let the STT hear.

While an uninterruptible speech is current (with ``discard_audio_if_uninterruptible``, livekit's
default) and during AEC warm-up, livekit feeds the STT silence instead of the caller's audio, so
those words are never transcribed. :class:`WithheldAudioTap` sits in front of the session's audio
input (the same chaining livekit's own recorder uses), keeps the last seconds of audio, and notes
which frames livekit is withholding from the STT at the moment they pass. When a speech window of
the caller contained withheld audio, :func:`transcribe` runs the window through a fresh stream of
the session's own STT.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from livekit import rtc
from livekit.agents import AgentSession, stt
from livekit.agents.voice.io import AudioInput
from typing_extensions import override

__all__ = ["TappedFrame", "WithheldAudioTap", "stt_is_withheld", "transcribe"]


@dataclass(frozen=True)
class TappedFrame:
    """One frame of caller audio as it reached livekit.

    Attributes:
        at: ``time.time()`` when it passed.
        frame: The audio.
        withheld: Whether livekit replaced it with silence for the STT.
    """

    at: float
    frame: rtc.AudioFrame
    withheld: bool


class _WarmupClock:
    """Approximates livekit's AEC warm-up: the first seconds of agent speech in a session."""

    def __init__(self, session: AgentSession[Any]) -> None:
        self._session = session
        self._spoken = 0.0

    def active(self, frame_seconds: float) -> bool:
        warmup = self._session.options.aec_warmup_duration
        if not warmup or self._session.agent_state != "speaking":
            return False
        self._spoken += frame_seconds
        return self._spoken <= warmup


def stt_is_withheld(session: AgentSession[Any]) -> bool:
    """Whether livekit feeds the STT silence right now because of uninterruptible speech."""
    speech = session.current_speech
    return bool(
        speech is not None
        and not speech.done()
        and not speech.interrupted
        and not speech.allow_interruptions
        and session.options.interruption["discard_audio_if_uninterruptible"]
    )


class WithheldAudioTap(AudioInput):
    """Passes the caller's audio through unchanged and remembers the last ``keep_seconds``."""

    def __init__(
        self,
        source: AudioInput,
        session: AgentSession[Any],
        *,
        keep_seconds: float,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(label="WithheldAudioTap", source=source)
        self._session = session
        self._keep_seconds = keep_seconds
        # resolved at call time: a patched clock (the lab's virtual time) must be honoured
        self._clock = clock or (lambda: time.time())
        self._warmup = _WarmupClock(session)
        self._frames: deque[TappedFrame] = deque()

    @override
    async def __anext__(self) -> rtc.AudioFrame:
        frame = await super().__anext__()
        now = self._clock()
        withheld = stt_is_withheld(self._session) or self._warmup.active(frame.duration)
        self._frames.append(TappedFrame(now, frame, withheld))
        while self._frames and self._frames[0].at < now - self._keep_seconds:
            self._frames.popleft()
        return frame

    def window(self, start: float, end: float) -> list[TappedFrame]:
        """The frames that passed between ``start`` and ``end``."""
        return [f for f in self._frames if start <= f.at <= end]

    @property
    def buffered_seconds(self) -> float:
        """Seconds of audio held right now (bounded by ``keep_seconds``)."""
        return sum(f.frame.duration for f in self._frames)


async def transcribe(recognizer: stt.STT[Any], frames: list[rtc.AudioFrame]) -> str:
    """The final transcript of ``frames`` from a fresh stream of ``recognizer``."""
    stream = recognizer.stream()
    texts: list[str] = []
    try:
        for frame in frames:
            stream.push_frame(frame)
        stream.end_input()
        async for event in stream:
            if event.type == stt.SpeechEventType.FINAL_TRANSCRIPT and event.alternatives:
                text = event.alternatives[0].text.strip()
                if text:
                    texts.append(text)
    finally:
        await stream.aclose()
    return " ".join(texts)
