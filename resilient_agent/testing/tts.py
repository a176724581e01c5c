"""A TTS whose audio says which sentence it is, so the lab knows what the caller heard.

Each synthesized sentence gets an id and lasts ``len(text) * seconds_per_char`` (at least
``min_seconds``); every 10 ms of its audio carries that id (see :mod:`.audio`). The
:class:`~resilient_agent.testing.audio.PlayoutAudioOutput` reads the ids back while playing.
"""

from __future__ import annotations

import asyncio

import numpy as np
from livekit.agents import tts, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions
from typing_extensions import Never, override

from .audio import (
    FRAME_SECONDS,
    KIND_AGENT,
    SAMPLE_RATE,
    AudioMarker,
    marker_frame_samples,
    marker_tone,
)
from .schedule import delivery_wait

__all__ = ["ScriptedTTS", "marked_sentence_audio", "spoken_seconds"]


def spoken_seconds(text: str, *, seconds_per_char: float, min_seconds: float) -> float:
    """How long scripted speech of ``text`` lasts: its characters' time, or ``min_seconds``."""
    return max(min_seconds, len(text.strip()) * seconds_per_char)


def marked_sentence_audio(
    sentence_id: int, seconds: float, sample_rate: int = SAMPLE_RATE
) -> np.ndarray:
    """The int16 audio of one sentence lasting ``seconds``: every 10 ms frame carries its marker.

    Args:
        sentence_id: The sentence the marks name.
        seconds: How long it lasts.
        sample_rate: Its rate (a multiple of 100): the lab's own by default.
    """
    frames = max(1, round(seconds / FRAME_SECONDS))
    base = None if sample_rate == SAMPLE_RATE else marker_tone(sample_rate)
    audio = np.concatenate(
        [
            marker_frame_samples(AudioMarker(KIND_AGENT, sentence_id, i, 0, frames), base)
            for i in range(frames)
        ]
    )
    assert len(audio) == frames * round(sample_rate * FRAME_SECONDS)
    return audio


class ScriptedTTS(tts.TTS[Never]):
    """Non-streaming TTS (livekit drives it sentence by sentence through its StreamAdapter).

    ``fails_sentence``: the synthesis of that sentence (1-based, in call order) raises a plain
    ``RuntimeError`` after its time to first byte, as a provider error mid-speech would.
    ``empty_sentence``: every attempt at that sentence ends without a single frame (livekit
    retries it, then gives the reply up). ``silent_sentence``: that sentence is digital silence
    of its length (played, and recorded as said).

    Attributes:
        sentences: Sentence id to text, for every sentence synthesized so far.
        synthesized_at: Sentence id to the loop time its synthesis was requested.
    """

    def __init__(
        self,
        *,
        seconds_per_char: float = 1 / 15,
        min_seconds: float = 0.3,
        ttfb: float = 0.15,
        fails_sentence: int | None = None,
        empty_sentence: int | None = None,
        silent_sentence: int | None = None,
    ) -> None:
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=False),
            sample_rate=SAMPLE_RATE,
            num_channels=1,
        )
        self.seconds_per_char = seconds_per_char
        self.min_seconds = min_seconds
        self.ttfb = ttfb
        self.fails_sentence = fails_sentence
        self.empty_sentence = empty_sentence
        self.silent_sentence = silent_sentence
        self.sentences: dict[int, str] = {}
        self.synthesized_at: dict[int, float] = {}

    @property
    @override
    def model(self) -> str:
        return "scripted-marker-tts"

    @property
    @override
    def provider(self) -> str:
        return "resilient_agent.testing"

    def duration_of(self, text: str) -> float:
        """How long the audio for ``text`` lasts."""
        return spoken_seconds(
            text, seconds_per_char=self.seconds_per_char, min_seconds=self.min_seconds
        )

    def sentence_audio(self, text: str, sentence_id: int) -> np.ndarray:
        """The int16 audio of one sentence: every 10 ms frame carries the sentence's marker."""
        return marked_sentence_audio(sentence_id, self.duration_of(text))

    @override
    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> ScriptedChunkedStream:
        sentence_id = len(self.sentences) + 1
        self.sentences[sentence_id] = text.strip()
        self.synthesized_at[sentence_id] = asyncio.get_running_loop().time()
        return ScriptedChunkedStream(
            owner=self, input_text=text, sentence_id=sentence_id, conn_options=conn_options
        )


class ScriptedChunkedStream(tts.ChunkedStream):
    """Synthesis of one sentence by :class:`ScriptedTTS`."""

    def __init__(
        self,
        *,
        owner: ScriptedTTS,
        input_text: str,
        sentence_id: int,
        conn_options: APIConnectOptions,
    ) -> None:
        super().__init__(tts=owner, input_text=input_text, conn_options=conn_options)
        self._owner = owner
        self._sentence_id = sentence_id

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        owner = self._owner
        output_emitter.initialize(
            request_id=utils.shortuuid("tts_"),
            sample_rate=SAMPLE_RATE,
            num_channels=1,
            mime_type="audio/pcm",
        )
        await asyncio.sleep(delivery_wait("tts", owner.ttfb))
        if self._sentence_id == owner.fails_sentence:
            raise RuntimeError("scripted TTS: synthesis failed mid-speech")
        if self._sentence_id == owner.empty_sentence:
            return  # the stream ends, and not a frame came
        audio = owner.sentence_audio(self.input_text, self._sentence_id)
        if self._sentence_id == owner.silent_sentence:
            audio = np.zeros_like(audio)
        output_emitter.push(audio.tobytes())
        output_emitter.flush()
