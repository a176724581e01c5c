"""A streaming STT that transcribes exactly the words whose audio reached it.

Each user word is spread over a run of marked 10 ms frames (see :mod:`.audio`). The STT counts the
frames of each word it actually receives; a word is recognised once at least half of its frames
arrived. Frames that livekit replaced with silence carry no marker, so words spoken over protected
agent speech or during AEC warm-up are lost here exactly as a real STT would lose them.

Interim transcripts follow each recognised word (unless ``interim_results=False``: an STT that
sends only finals); the final transcript comes after ``endpoint_silence`` of frames without
speech, or at once when livekit flushes the stream. With a ``script`` the STT hears what the
caller says by time instead of the frames' samples, as livekit's own test fakes do (for quiet
and zeros lines; see :data:`~resilient_agent.testing.audio.CallerLine`).

With ``dies_at``, the stream that receives the first frame at or after that call time raises a
plain ``RuntimeError`` (as a plugin's bug or an unexpected server message would), once: the
words it was hearing are lost with it, and a new stream works. With ``silent_at``, the stream
that receives the first frame at or after that time goes on taking audio and answers nothing,
no transcript and no error (a half-open socket), once: a new stream works.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from livekit import rtc
from livekit.agents import LanguageCode, stt
from livekit.agents.types import (
    DEFAULT_API_CONNECT_OPTIONS,
    NOT_GIVEN,
    APIConnectOptions,
    NotGivenOr,
)
from livekit.agents.utils.audio import AudioBuffer
from typing_extensions import Never, override

from .audio import KIND_USER, frame_markers, read_markers
from .schedule import delivery_wait

__all__ = ["HeardWord", "ScriptedSTT"]

WordLookup = Callable[[int, int], str]


@dataclass(frozen=True)
class HeardWord:
    """A word the STT recognised.

    Attributes:
        utterance: The index of the utterance it belongs to.
        index: The word index within the utterance.
        text: The word.
    """

    utterance: int
    index: int
    text: str


@dataclass
class _Segment:
    words: list[HeardWord] = field(default_factory=list)
    frames: dict[tuple[int, int], int] = field(default_factory=dict)
    silence_frames: int = 0


class ScriptedSTT(stt.STT[Never]):
    """Streaming STT over marked audio. ``word_lookup(utterance, word)`` gives the text."""

    def __init__(
        self,
        word_lookup: WordLookup,
        *,
        endpoint_silence: float = 0.2,
        interim_results: bool = True,
        script: Callable[[float], np.ndarray] | None = None,
        dies_at: float | None = None,
        silent_at: float | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(
            capabilities=stt.STTCapabilities(
                streaming=True, interim_results=interim_results, offline_recognize=False
            )
        )
        self.interim_results = interim_results
        self.script = script
        self._word_lookup = word_lookup
        self.endpoint_silence = endpoint_silence
        self.finals: list[tuple[float, str, tuple[HeardWord, ...]]] = []
        self.frames_received = 0
        self.frames_with_speech = 0
        self.dies_at = dies_at
        self.died_at: float | None = None
        self.silent_at = silent_at
        self.went_silent_at: float | None = None
        self._clock = clock or (lambda: asyncio.get_running_loop().time())

    @property
    @override
    def model(self) -> str:
        return "scripted-marker-stt"

    @property
    @override
    def provider(self) -> str:
        return "resilient_agent.testing"

    async def _recognize_impl(
        self,
        buffer: AudioBuffer,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions,
    ) -> stt.SpeechEvent:
        raise NotImplementedError("ScriptedSTT only streams")

    @override
    def stream(
        self,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
    ) -> ScriptedRecognizeStream:
        return ScriptedRecognizeStream(self, conn_options=conn_options)

    def dies_now(self) -> bool:
        """Whether the stream that gets a frame now dies (once per STT)."""
        if self.dies_at is None or self.died_at is not None or self._clock() < self.dies_at:
            return False
        self.died_at = self._clock()
        return True

    def goes_silent_now(self) -> bool:
        """Whether the stream that gets a frame now stops answering for good (once per STT)."""
        if (
            self.silent_at is None
            or self.went_silent_at is not None
            or self._clock() < self.silent_at
        ):
            return False
        self.went_silent_at = self._clock()
        return True

    def word(self, utterance: int, index: int) -> str:
        """The text of word ``index`` of utterance ``utterance``."""
        return self._word_lookup(utterance, index)


class ScriptedRecognizeStream(stt.RecognizeStream):
    """One recognition stream of :class:`ScriptedSTT`."""

    def __init__(self, owner: ScriptedSTT, *, conn_options: APIConnectOptions) -> None:
        super().__init__(stt=owner, conn_options=conn_options)
        self._owner = owner
        self._silent = False

    async def _run(self) -> None:
        owner = self._owner
        segment = _Segment()
        async for item in self._input_ch:
            if self._silent or owner.goes_silent_now():
                # a half-open socket: the audio goes in, nothing ever comes back
                self._silent = True
                continue
            wait = delivery_wait("stt", 0.0)
            if wait > 0:
                await asyncio.sleep(wait)
            if not isinstance(item, rtc.AudioFrame):
                self._finalize(segment)
                segment = _Segment()
                continue
            if owner.dies_now():
                raise RuntimeError("scripted STT: the stream died mid-utterance")
            owner.frames_received += 1
            heard = (
                frame_markers(item)
                if owner.script is None
                else read_markers(owner.script(asyncio.get_running_loop().time()))
            )
            markers = [m for m in heard if m.kind == KIND_USER]
            if not markers:
                segment.silence_frames += 1
                if segment.words and segment.silence_frames * item.duration >= (
                    owner.endpoint_silence - 1e-9
                ):
                    self._finalize(segment)
                    segment = _Segment()
                continue
            owner.frames_with_speech += 1
            segment.silence_frames = 0
            # one marker per 10 ms of audio: a longer frame carries several
            for marker in markers:
                key = (marker.source_id, marker.part)
                count = segment.frames.get(key, 0) + 1
                segment.frames[key] = count
                already = any(w.utterance == key[0] and w.index == key[1] for w in segment.words)
                if not already and count * 2 >= marker.frames_in_part:
                    segment.words.append(HeardWord(key[0], key[1], owner.word(*key)))
                    if owner.interim_results:
                        self._emit(stt.SpeechEventType.INTERIM_TRANSCRIPT, segment.words)
        if not self._silent:
            self._finalize(segment)

    def _finalize(self, segment: _Segment) -> None:
        if not segment.words:
            return
        text = self._emit(stt.SpeechEventType.FINAL_TRANSCRIPT, segment.words)
        self._owner.finals.append((asyncio.get_running_loop().time(), text, tuple(segment.words)))
        segment.words = []

    def _emit(self, event_type: stt.SpeechEventType, words: list[HeardWord]) -> str:
        text = " ".join(w.text for w in words)
        self._event_ch.send_nowait(
            stt.SpeechEvent(
                type=event_type,
                alternatives=[
                    stt.SpeechData(language=LanguageCode("en"), text=text, confidence=1.0)
                ],
            )
        )
        return text
