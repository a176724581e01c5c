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
# Audio kept before the caller shows as speaking (the VAD's onset lag and the keeper's pad), and
# how long a finished speech window is kept for the keeper to take it: outside a window of the
# caller's speech nothing is ever re-transcribed, so nothing more is kept.
_PRE_ROLL_S = 0.5
_WINDOW_KEPT_S = 0.5


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
    """Remembers the caller's speech window (at most ``keep_seconds``) and what was withheld.

    Only the audio a recovery may need is kept: the caller's current speech window (from half a
    second before they showed as speaking until half a second after, long enough for the turn
    keeper to take it), or the last half second while they are silent. Frames are kept by
    reference, never copied. Feed it with :meth:`on_frame`
    (``MiddlewareContext.observe_audio`` does).
    """

    def __init__(self, session: AgentSession[Any], *, keep_seconds: float) -> None:
        self._session = session
        self._keep_seconds = keep_seconds
        self._warmup = _WarmupClock(session)
        # plain tuples (at, frame, withheld): this runs for every 10-20 ms frame of the call
        self._frames: deque[tuple[float, rtc.AudioFrame, bool]] = deque()
        self._withheld = False
        self._checked_at = float("-inf")
        self._speech_from = float("-inf")
        self._speech_seen_at = float("-inf")
        self._speaking = False
        self._keep_from = float("-inf")

    def on_frame(self, frame: rtc.AudioFrame, now: float) -> None:
        """Keep one frame, noting whether livekit withholds it from the STT right now."""
        frames = self._frames
        if now - self._checked_at >= _RECHECK_S:
            # whole speech windows are re-transcribed, so 50 ms resolution is plenty
            self._checked_at = now
            self._withheld = stt_is_withheld(self._session) or self._warmup.active(_RECHECK_S)
            self._keep_from = self._window_start(now)
        frames.append((now, frame, self._withheld))
        while frames[0][0] < self._keep_from:
            frames.popleft()

    def _window_start(self, now: float) -> float:
        """The oldest audio a recovery may still need."""
        speaking = self._session.user_state == "speaking"
        if speaking:
            if not self._speaking:
                self._speech_from = now  # a new speech window opens
            self._speech_seen_at = now
        self._speaking = speaking
        if now - self._speech_seen_at <= _WINDOW_KEPT_S:
            start = self._speech_from - _PRE_ROLL_S
        else:
            start = now - _PRE_ROLL_S
        return max(start, now - self._keep_seconds)

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
