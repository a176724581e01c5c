"""Real speech for lab calls: espeak-ng voices, a PocketSphinx recognizer, reference transcripts.

A scenario with :class:`RealSpeech` runs with real audio end to end: the caller's utterances are
espeak-ng recordings (no markers in them), livekit's embedded Silero VAD hears them, a
:class:`~resilient_agent.testing.pocketsphinx_stt.PocketSphinxSTT` transcribes what livekit lets
through, and the agent speaks with an espeak-ng voice (:class:`EspeakTTS`).

A recognizer mishears, so "every word reached the LLM" cannot mean the scripted words. Each
utterance's text is instead its *reference transcription*: what the same recognizer transcribes
from the same audio when nothing is withheld. :func:`reference_transcripts` judges what reached
the LLM against it with a word error rate tolerance.

Voices are made once per text and kept in a cache folder (``RESILIENT_AGENT_SPEECH_CACHE``, else
``~/.cache/resilient-agent/speech``), named by a hash of the voice, rate and text, so runs are
deterministic and repeat runs skip espeak-ng.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from livekit import rtc
from livekit.agents import stt
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS
from livekit.agents.utils.audio import AudioBuffer
from typing_extensions import override

from .audio import (
    FRAME_SAMPLES,
    KIND_AGENT,
    SAMPLE_RATE,
    AudioMarker,
    marker_frame_samples,
)
from .pocketsphinx_stt import PocketSphinxStream, PocketSphinxSTT
from .speech import espeak, load_wav
from .stt import HeardWord
from .tts import ScriptedTTS

__all__ = [
    "AGENT_VOICE",
    "CALLER_VOICE",
    "EspeakTTS",
    "LabRecognizer",
    "RealSpeech",
    "Voice",
    "caller_recording",
    "word_error_rate",
]

# 10 ms frame alignments against the endpointer's 30 ms frames
_ALIGNMENTS = 3
# a live stream cannot be fed faster than real time; a recovery stream gets its audio at once
_BATCH_MARGIN_S = 0.5
# int16 amplitude below which a 10 ms frame of a recording is silence (espeak-ng's is near 0)
_SILENCE_AMPLITUDE = 64
# how far the agent's voice may be slowed or sped up to keep the scripted TTS's timing
_SLOWEST_AGENT_WPM = 100
_FASTEST_AGENT_WPM = 260
_CALIBRATION = (
    "the quick brown fox jumps over the lazy dog while five boxing wizards jump quickly and "
    "we listen to every word"
)


@dataclass(frozen=True)
class Voice:
    """An espeak-ng voice.

    Attributes:
        name: The espeak-ng voice (``espeak-ng --voices``).
        words_per_minute: Speaking rate.
    """

    name: str
    words_per_minute: int


CALLER_VOICE = Voice("en-us", 150)
"""The caller: espeak-ng's American English voice at its default rate."""
AGENT_VOICE = Voice("en-us+f3", 160)
"""The agent: a second voice; :class:`EspeakTTS` paces each sentence to the scripted TTS."""


def _cache_dir() -> Path:
    configured = os.environ.get("RESILIENT_AGENT_SPEECH_CACHE")
    folder = Path(configured) if configured else Path.home() / ".cache" / "resilient-agent"
    folder = folder / "speech"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def caller_recording(
    text: str, voice: Voice = CALLER_VOICE, *, trailing_silence: bool = True
) -> Path:
    """A 16 kHz WAV of ``text`` said by ``voice``, made once and cached.

    Args:
        text: The words.
        voice: The espeak-ng voice.
        trailing_silence: Keep the silence espeak-ng ends every recording with (about 0.4 s);
            without it the recording ends with the last 10 ms frame the voice is heard in, as
            a scripted utterance ends with its last word.

    Raises:
        RuntimeError: espeak-ng is not installed (``apt-get install espeak-ng``).
    """
    identity = f"{voice.name}|{voice.words_per_minute}|{text}"
    if not trailing_silence:
        identity += "|voiced"
    key = hashlib.sha256(identity.encode()).hexdigest()
    path = _cache_dir() / f"{key[:24]}.wav"
    if not path.exists():
        samples = espeak(text, voice=voice.name, words_per_minute=voice.words_per_minute)
        if not trailing_silence:
            samples = _without_trailing_silence(samples)
        partial = path.with_suffix(f".{os.getpid()}.part")
        with wave.open(str(partial), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(SAMPLE_RATE)
            out.writeframes(samples.tobytes())
        partial.replace(path)
    return path


def _without_trailing_silence(samples: np.ndarray) -> np.ndarray:
    frames = len(samples) // FRAME_SAMPLES
    loud = np.abs(samples[: frames * FRAME_SAMPLES].reshape(frames, FRAME_SAMPLES)).max(axis=1)
    heard = np.nonzero(loud > _SILENCE_AMPLITUDE)[0]
    last = int(heard[-1]) + 1 if len(heard) else frames
    return samples[: max(1, last) * FRAME_SAMPLES].copy()


@functools.lru_cache(maxsize=512)
def _voice_samples(text: str, voice: Voice) -> np.ndarray:
    return load_wav(caller_recording(text, voice))


@functools.lru_cache(maxsize=8)
def _caller_cepstral_mean(phrases: tuple[str, ...]) -> str:
    general = PocketSphinxSTT(phrases=phrases)
    return general.measure_cepstral_mean(_voice_samples(_CALIBRATION, CALLER_VOICE))


class LabRecognizer(PocketSphinxSTT):
    """A real-speech call's STT: ``PocketSphinxSTT`` adapted to the caller, keeping its finals.

    Attributes:
        finals: ``(loop time, text, ())`` of each final of a live stream (livekit's own); the
            words are not traced to utterances, as a real recognizer cannot.
        recovered: ``(loop time, text)`` of each final of a stream fed faster than real time:
            audio re-transcribed after the fact (a middleware recovering withheld words).

    Raises:
        ImportError: pocketsphinx is missing (``pip install 'resilient-agent[speech]'``).
    """

    def __init__(self, phrases: tuple[str, ...]) -> None:
        super().__init__(phrases=phrases, cepstral_mean=_caller_cepstral_mean(phrases))
        self.finals: list[tuple[float, str, tuple[HeardWord, ...]]] = []
        self.recovered: list[tuple[float, str]] = []

    @override
    def stream(self, **kwargs: Any) -> PocketSphinxStream:
        return _RecordedStream(self)

    @override
    async def recognize(self, buffer: AudioBuffer, **kwargs: Any) -> stt.SpeechEvent:
        # audio recognized in one request is audio re-transcribed after the fact
        event = await super().recognize(buffer, **kwargs)
        text = event.alternatives[0].text.strip() if event.alternatives else ""
        if text:
            self.recovered.append((asyncio.get_running_loop().time(), text))
        return event


class _RecordedStream(PocketSphinxStream):
    """Records finals; a stream fed faster than real time is a recovery, not the live one."""

    def __init__(self, owner: LabRecognizer) -> None:
        super().__init__(owner, conn_options=DEFAULT_API_CONNECT_OPTIONS)
        self._recorder = owner
        self._opened_at = asyncio.get_running_loop().time()
        self._pushed_s = 0.0

    @override
    def push_frame(self, frame: rtc.AudioFrame) -> None:
        self._pushed_s += frame.duration
        super().push_frame(frame)

    @override
    def _send(self, results: list[tuple[bool, str]]) -> None:
        now = asyncio.get_running_loop().time()
        batch = self._pushed_s > now - self._opened_at + _BATCH_MARGIN_S
        for is_final, text in results:
            if is_final and text:
                if batch:
                    self._recorder.recovered.append((now, text))
                else:
                    self._recorder.finals.append((now, text, ()))
        super()._send(results)


@dataclass(frozen=True)
class RealSpeech:
    """How a scenario runs with real speech.

    Attributes:
        phrases: The recognizer's domain: the sentences callers in the lab say.
        said: Per utterance, the words its recording says (the script); each utterance's own
            ``text`` is its reference transcription.
        word_error_tolerance: The largest word error rate, per utterance, between what reached
            the LLM and the closest of its reference transcriptions.
        alternatives: Per utterance, its other reference transcriptions (see
            :meth:`references`).
    """

    phrases: tuple[str, ...]
    said: tuple[str, ...]
    word_error_tolerance: float = 0.34
    alternatives: tuple[tuple[str, ...], ...] = ()

    def recognizer(self) -> LabRecognizer:
        """A fresh STT for one call (the language model is built once per phrase set)."""
        return LabRecognizer(self.phrases)

    def voice(self) -> EspeakTTS:
        """A fresh agent voice for one call."""
        return EspeakTTS()

    def references(self, samples: np.ndarray) -> tuple[str, ...]:
        """What the recognizer transcribes from ``samples`` alone, at each frame alignment.

        The live stream gets 10 ms frames and PocketSphinx's endpointer reads 30 ms ones, so
        an utterance can meet the endpointer at three alignments, and the recognizer may hear
        it differently at each: all three are references (the first is the utterance's text).
        """
        recognizer = self.recognizer()
        identity = "|".join((*self.phrases, _caller_cepstral_mean(self.phrases)))
        digest = hashlib.sha256(identity.encode() + samples.tobytes()).hexdigest()[:24]
        found = []
        for shift in range(_ALIGNMENTS):
            # transcripts are kept beside the recordings: the same audio and model, same words
            cached = _cache_dir() / f"{digest}-{shift}.txt"
            if cached.exists():
                found.append(cached.read_text(encoding="utf-8"))
                continue
            lead = np.zeros(SAMPLE_RATE // 2 + shift * FRAME_SAMPLES, dtype=np.int16)
            tail = np.zeros(SAMPLE_RATE, dtype=np.int16)
            text = recognizer.transcribe_samples(np.concatenate([lead, samples, tail]))
            cached.write_text(text, encoding="utf-8")
            found.append(text)
        return tuple(found)

    def candidates(self, index: int, text: str) -> tuple[str, ...]:
        """Every reference of utterance ``index`` whose first reference is ``text``."""
        others = self.alternatives[index] if index < len(self.alternatives) else ()
        return tuple(dict.fromkeys((text, *others)))


class EspeakTTS(ScriptedTTS):
    """The agent's voice: espeak-ng audio, with the sentence markers the lab's speaker reads."""

    def __init__(self, voice: Voice = AGENT_VOICE) -> None:
        super().__init__()
        self.voice = voice

    @property
    @override
    def model(self) -> str:
        return f"espeak-ng-{self.voice.name}"

    @override
    def duration_of(self, text: str) -> float:
        frames = -(-len(self._samples(text)) // FRAME_SAMPLES)
        return max(1, frames) * FRAME_SAMPLES / SAMPLE_RATE

    def _samples(self, text: str) -> np.ndarray:
        """``text`` in this voice, paced to last as long as the scripted TTS says it.

        Race windows were chosen for the scripted TTS's timing (a caller who speaks "as soon as
        the goodbye has ended"), so the agent's voice keeps it.
        """
        text = text.strip()
        natural = len(_voice_samples(text, self.voice)) / SAMPLE_RATE
        scripted = super().duration_of(text)
        rate = round(self.voice.words_per_minute * natural / scripted)
        rate = min(_FASTEST_AGENT_WPM, max(_SLOWEST_AGENT_WPM, rate))
        return _voice_samples(text, Voice(self.voice.name, rate))

    @override
    def sentence_audio(self, text: str, sentence_id: int) -> np.ndarray:
        samples = self._samples(text)
        frames = max(1, -(-len(samples) // FRAME_SAMPLES))
        padded = np.zeros(frames * FRAME_SAMPLES, dtype=np.int16)
        padded[: len(samples)] = samples
        return np.concatenate(
            [
                marker_frame_samples(
                    AudioMarker(KIND_AGENT, sentence_id, i, 0, frames),
                    padded[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES],
                )
                for i in range(frames)
            ]
        )


def word_error_rate(reference: Sequence[str], hypothesis: Sequence[str]) -> float:
    """Substitutions, deletions and insertions over the reference's length (1.0 if empty)."""
    if not reference:
        return 0.0 if not hypothesis else 1.0
    row = list(range(len(hypothesis) + 1))
    for i, ref_word in enumerate(reference, start=1):
        diagonal, row[0] = row[0], i
        for j, hyp_word in enumerate(hypothesis, start=1):
            diagonal, row[j] = (
                row[j],
                min(row[j] + 1, row[j - 1] + 1, diagonal + (ref_word != hyp_word)),
            )
    return row[-1] / len(reference)
