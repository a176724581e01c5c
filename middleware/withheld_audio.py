"""Recovering words livekit never let the STT hear.

While an uninterruptible speech is current (with ``discard_audio_if_uninterruptible``, livekit's
default) and during AEC warm-up, livekit feeds the STT silence instead of the caller's audio, so
those words are never transcribed. :class:`WithheldAudioTap` sees every frame of the caller's
audio (through the chain's shared audio observer), keeps the last seconds of it, and notes which
frames livekit is withholding from the STT at the moment they pass. When a speech window of
the caller contained withheld audio, :func:`transcribe` runs the window through a fresh stream of
the session's own STT.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from livekit import rtc
from livekit.agents import AgentSession, stt

__all__ = ["TappedFrame", "WithheldAudioTap", "stt_is_withheld", "transcribe"]

# How often the tap asks whether livekit withholds the caller's audio from the STT.
_RECHECK_S = 0.05


@dataclass(frozen=True)
class TappedFrame:
    """One frame of caller audio as it reached livekit.

    Attributes:
        at: Loop time when it passed.
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
        self._over = False

    def active(self, elapsed: float) -> bool:
        # the cheap tests come first, and it stays off once the warm-up is over
        if self._over or self._session.agent_state != "speaking":
            return False
        warmup = self._session.options.aec_warmup_duration
        self._spoken += elapsed
        if not warmup or self._spoken > warmup:
            self._over = True
            return False
        return True


def stt_is_withheld(session: AgentSession[Any]) -> bool:
    """Whether livekit feeds the STT silence right now because of uninterruptible speech."""
    speech = session.current_speech
    if speech is None:
        return False
    return bool(
        not speech.done()
        and not speech.interrupted
        and not speech.allow_interruptions
        and session.options.interruption["discard_audio_if_uninterruptible"]
    )


class WithheldAudioTap:
    """Remembers the last ``keep_seconds`` of the caller's audio and what livekit withheld.

    Feed it with :meth:`on_frame` (``MiddlewareContext.observe_audio`` does).
    """

    def __init__(self, session: AgentSession[Any], *, keep_seconds: float) -> None:
        self._session = session
        self._keep_seconds = keep_seconds
        self._warmup = _WarmupClock(session)
        # plain tuples (at, frame, withheld): this runs for every 10-20 ms frame of the call
        self._frames: deque[tuple[float, rtc.AudioFrame, bool]] = deque()
        self._withheld = False
        self._checked_at = float("-inf")

    def on_frame(self, frame: rtc.AudioFrame, now: float) -> None:
        """Keep one frame, noting whether livekit withholds it from the STT right now."""
        frames = self._frames
        if now - self._checked_at >= _RECHECK_S:
            # whole speech windows are re-transcribed, so 50 ms resolution is plenty
            self._checked_at = now
            self._withheld = stt_is_withheld(self._session) or self._warmup.active(_RECHECK_S)
        frames.append((now, frame, self._withheld))
        if frames[0][0] < now - self._keep_seconds:
            frames.popleft()

    def take_over(self, previous: WithheldAudioTap) -> None:
        """Put the audio ``previous`` kept (a handed-off agent's tap) in front of this one's."""
        first = self._frames[0][0] if self._frames else float("inf")
        earlier = [f for f in previous._frames if f[0] < first]
        self._frames.extendleft(reversed(earlier))

    def window(self, start: float, end: float) -> list[TappedFrame]:
        """The frames that passed between ``start`` and ``end`` (loop time)."""
        found: list[TappedFrame] = []
        for at, frame, withheld in reversed(self._frames):
            if at < start:
                break
            if at <= end:
                found.append(TappedFrame(at, frame, withheld))
        found.reverse()
        return found

    @property
    def buffered_seconds(self) -> float:
        """Seconds of audio held right now (bounded by ``keep_seconds``)."""
        return sum(f[1].duration for f in self._frames)


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
