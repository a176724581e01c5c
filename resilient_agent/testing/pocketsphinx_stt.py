"""An offline streaming STT for development: livekit's ``stt.STT`` around CMU PocketSphinx.

PocketSphinx 5 ships its US English model inside its wheel, so this recognizer runs with no
network and no API key. It is far less accurate than a cloud STT, which is the point in the lab:
it mishears, and it hears what it is given, so words livekit withholds from it are really lost.
Install the optional extra::

    pip install 'resilient-agent[speech]'

and use it like any livekit STT plugin::

    from resilient_agent.testing.pocketsphinx_stt import PocketSphinxSTT

    session = AgentSession(stt=PocketSphinxSTT(phrases=["book a table for two", ...]), ...)

``phrases`` (the sentences callers of your app are likely to say) builds a small language model
from them with PocketSphinx's own builder; recognition is then much better on those words.

Each stream finds speech with PocketSphinx's endpointer, sends an interim transcript as the
hypothesis grows, a final one after ``endpoint_silence`` of non-speech, and a final one at once
when livekit flushes the stream or ends its input. Every utterance is decoded from the same
initial state (``cepstral_mean``), so the same audio gives the same words in any stream. Decoding
runs in the loop's default executor, one job at a time per stream.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import importlib
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from livekit import rtc
from livekit.agents import LanguageCode, stt, utils
from livekit.agents.types import (
    DEFAULT_API_CONNECT_OPTIONS,
    NOT_GIVEN,
    APIConnectOptions,
    NotGivenOr,
)
from livekit.agents.utils.audio import AudioBuffer
from typing_extensions import Never, override

__all__ = ["SAMPLE_RATE", "PocketSphinxSTT", "PocketSphinxStream", "require_pocketsphinx"]

SAMPLE_RATE = 16_000
"""The rate the model expects; livekit resamples the caller's audio to it."""

_EXTRA_HINT = "install the optional extra: pip install 'resilient-agent[speech]'"
_WORD = re.compile(r"[a-z']+")
_FILLER = re.compile(r"^(<.*>|\[.*\]|\(.*\))$")


def require_pocketsphinx() -> ModuleType:
    """Import ``pocketsphinx`` (5.x), or explain which extra provides it.

    Raises:
        ImportError: pocketsphinx is not installed; the message names the extra.
    """
    try:
        return importlib.import_module("pocketsphinx")
    except ImportError as exc:
        raise ImportError(f"PocketSphinxSTT needs pocketsphinx: {_EXTRA_HINT}") from exc


def _words_of(text: str) -> list[str]:
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class _Model:
    """What a decoder is built from (one per :class:`PocketSphinxSTT`)."""

    config: dict[str, Any]
    cepstral_mean: str | None
    name: str


def _phrase_model(ps: ModuleType, phrases: Sequence[str]) -> dict[str, Any]:
    """Language model and dictionary files for ``phrases`` (built once per phrase set)."""
    sentences = tuple(s for s in (" ".join(_words_of(p)) for p in phrases) if s)
    if not sentences:
        raise ValueError("PocketSphinxSTT(phrases=...): give at least one phrase with words")
    return dict(_phrase_files(ps, sentences))


@functools.lru_cache(maxsize=16)
def _phrase_files(ps: ModuleType, sentences: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    vocabulary = {w for s in sentences for w in s.split()}
    model_dir = Path(ps.get_model_path()) / "en-us"
    entries: list[str] = []
    known: set[str] = set()
    with open(model_dir / "cmudict-en-us.dict", encoding="utf-8") as dictionary:
        for line in dictionary:
            word = line.split(" ", 1)[0].split("(", 1)[0]
            if word in vocabulary:
                entries.append(line)
                known.add(word)
    unknown = sorted(vocabulary - known)
    if unknown:
        raise ValueError(
            f"PocketSphinxSTT(phrases=...): not in the English dictionary: {', '.join(unknown)};"
            " spell them as ordinary words or leave them out"
        )
    lm_module = importlib.import_module("pocketsphinx.lm")
    builder = lm_module.ArpaBoLM(text="\n".join(sentences), case="lower", add_start=True)
    builder.compute()
    # the files live as long as the process: every recognizer with these phrases shares them
    folder = Path(tempfile.mkdtemp(prefix="resilient-agent-sphinx-"))
    _FOLDERS.append(folder)
    lm_path, dict_path = folder / "phrases.arpa", folder / "phrases.dict"
    with open(lm_path, "w", encoding="utf-8") as out:
        builder.write(out)
    dict_path.write_text("".join(entries), encoding="utf-8")
    return (("lm", str(lm_path)), ("dict", str(dict_path)))


_FOLDERS: list[Path] = []


@atexit.register
def _remove_phrase_files() -> None:
    for folder in _FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class _Recognition:
    """One stream's recognizer state: endpointer, decoder and the utterance under way.

    Every method is blocking (it runs PocketSphinx) and is called from one thread at a time.
    """

    ps: ModuleType
    model: _Model
    endpoint_silence: float
    decoder: Any = None
    endpointer: Any = None
    pending: bytearray = field(default_factory=bytearray)
    in_utterance: bool = False
    hypothesis: str = ""

    def _ensure(self) -> None:
        if self.decoder is None:
            self.ps.set_loglevel("ERROR")
            self.decoder = self.ps.Decoder(**self.model.config)
        if self.endpointer is None:
            self.endpointer = self.ps.Endpointer(
                window=self.endpoint_silence, sample_rate=SAMPLE_RATE
            )

    def feed(self, audio: bytes) -> list[tuple[bool, str]]:
        """Feed 16 kHz int16 audio; returns ``(is_final, text)`` results, in order."""
        self._ensure()
        results: list[tuple[bool, str]] = []
        self.pending += audio
        size = self.endpointer.frame_bytes
        while len(self.pending) >= size:
            frame = bytes(self.pending[:size])
            del self.pending[:size]
            speech = self.endpointer.process(frame)
            if speech:
                if not self.in_utterance:
                    self._start()
                self.decoder.process_raw(speech, False, False)
            if self.in_utterance and not self.endpointer.in_speech:
                results.append((True, self._end()))
        if self.in_utterance:
            text = self._hyp()
            if text and text != self.hypothesis:
                self.hypothesis = text
                results.append((False, text))
        return results

    def flush(self) -> list[tuple[bool, str]]:
        """End the segment: whatever speech is under way becomes final now."""
        self._ensure()
        results: list[tuple[bool, str]] = []
        if self.endpointer.in_speech or self.in_utterance:
            # end_stream refuses an empty buffer: one silent sample stands in for none
            rest = self.endpointer.end_stream(bytes(self.pending) or bytes(2))
            if rest:  # None, or nothing left: PocketSphinx refuses an empty buffer
                if not self.in_utterance:
                    self._start()
                self.decoder.process_raw(rest, False, False)
            if self.in_utterance:
                results.append((True, self._end()))
        self.pending.clear()
        # the endpointer has no reset: the next segment starts from a fresh one
        self.endpointer = None
        return results

    def _start(self) -> None:
        if self.model.cepstral_mean is not None:
            self.decoder.set_cmn(self.model.cepstral_mean)
        self.decoder.start_utt()
        self.in_utterance = True
        self.hypothesis = ""

    def _end(self) -> str:
        self.decoder.end_utt()
        self.in_utterance = False
        self.hypothesis = ""
        return self._hyp()

    def _hyp(self) -> str:
        hyp = self.decoder.hyp()
        if hyp is None:
            return ""
        return " ".join(w for w in hyp.hypstr.split() if not _FILLER.match(w))


class PocketSphinxSTT(stt.STT[Never]):
    """Streaming, offline English STT on PocketSphinx (optional extra ``speech``).

    Args:
        phrases: Sentences callers are likely to say; when given, recognition uses a language
            model built from them (every word must be in PocketSphinx's English dictionary).
            None uses the general English model shipped in the wheel.
        cepstral_mean: The cepstral mean every utterance starts from, as PocketSphinx writes it
            (13 comma-separated numbers, see :meth:`measure_cepstral_mean`). None starts from
            the model's default.
        endpoint_silence: Seconds of non-speech that end an utterance (its final transcript).
        language: The language code put on transcripts.

    Raises:
        ImportError: pocketsphinx is not installed (the message names the extra).
        ValueError: A phrase word is not in the dictionary, or ``endpoint_silence`` is not
            within 0.1-2.0 s.
    """

    def __init__(
        self,
        *,
        phrases: Sequence[str] | None = None,
        cepstral_mean: str | None = None,
        endpoint_silence: float = 0.3,
        language: str = "en-US",
    ) -> None:
        super().__init__(
            capabilities=stt.STTCapabilities(
                streaming=True, interim_results=True, offline_recognize=True
            )
        )
        if not 0.1 <= endpoint_silence <= 2.0:
            raise ValueError(
                f"PocketSphinxSTT(endpoint_silence={endpoint_silence}): use 0.1-2.0 seconds"
            )
        self._ps = require_pocketsphinx()
        config: dict[str, Any] = {"samprate": SAMPLE_RATE}
        name = "pocketsphinx-en-us"
        if phrases is not None:
            config.update(_phrase_model(self._ps, phrases))
            name += "-phrases"
        self._model = _Model(config, cepstral_mean, name)
        self.endpoint_silence = endpoint_silence
        self.language = LanguageCode(language)

    @property
    @override
    def model(self) -> str:
        return self._model.name

    @property
    @override
    def provider(self) -> str:
        return "pocketsphinx"

    def recognition(self) -> _Recognition:
        """A fresh recognizer state (blocking to use; streams run it in a thread)."""
        return _Recognition(self._ps, self._model, self.endpoint_silence)

    def transcribe_samples(self, samples: np.ndarray) -> str:
        """Transcribe 16 kHz int16 samples now, in this thread, exactly as a stream would.

        The audio goes through the endpointer and decoder of a fresh stream, then the stream
        is flushed; the finals are joined with spaces.
        """
        recognition = self.recognition()
        results = recognition.feed(samples.astype(np.int16).tobytes())
        results += recognition.flush()
        return " ".join(text for final, text in results if final and text)

    def measure_cepstral_mean(self, samples: np.ndarray) -> str:
        """The cepstral mean PocketSphinx settles on after hearing ``samples`` (16 kHz int16).

        Pass it as ``cepstral_mean`` to start every utterance adapted to that voice and line.
        """
        recognition = self.recognition()
        recognition.feed(samples.astype(np.int16).tobytes())
        recognition.flush()
        return str(recognition.decoder.get_cmn(False))

    async def _recognize_impl(
        self,
        buffer: AudioBuffer,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions,
    ) -> stt.SpeechEvent:
        frame = utils.combine_frames(buffer)
        samples = _mono_16k(frame)
        loop = asyncio.get_running_loop()
        text = await loop.run_in_executor(None, self.transcribe_samples, samples)
        return stt.SpeechEvent(
            type=stt.SpeechEventType.FINAL_TRANSCRIPT,
            alternatives=[stt.SpeechData(language=self.language, text=text, confidence=1.0)],
        )

    @override
    def stream(
        self,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
    ) -> PocketSphinxStream:
        return PocketSphinxStream(self, conn_options=conn_options)


def _mono_16k(frame: rtc.AudioFrame) -> np.ndarray:
    samples = np.frombuffer(frame.data, dtype=np.int16)
    if frame.num_channels > 1:
        samples = samples.reshape(-1, frame.num_channels).mean(axis=1).astype(np.int16)
    if frame.sample_rate != SAMPLE_RATE:
        duration = len(samples) / frame.sample_rate
        target = np.linspace(0.0, duration, int(duration * SAMPLE_RATE), endpoint=False)
        source = np.arange(len(samples)) / frame.sample_rate
        samples = np.interp(target, source, samples.astype(np.float64)).astype(np.int16)
    return samples


class PocketSphinxStream(stt.RecognizeStream):
    """One streaming recognition of :class:`PocketSphinxSTT`."""

    # audio handed to the decoder thread at once: the interim transcript's granularity
    CHUNK_SECONDS = 0.2

    def __init__(self, owner: PocketSphinxSTT, *, conn_options: APIConnectOptions) -> None:
        super().__init__(stt=owner, conn_options=conn_options, sample_rate=SAMPLE_RATE)
        self._owner = owner
        self._request_id = utils.shortuuid("sphinx_")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        recognition = self._owner.recognition()
        chunk = bytearray()
        chunk_bytes = int(self.CHUNK_SECONDS * SAMPLE_RATE) * 2
        async for item in self._input_ch:
            if isinstance(item, rtc.AudioFrame):
                chunk += _mono_16k(item).tobytes()
                if len(chunk) < chunk_bytes:
                    continue
                audio, chunk = bytes(chunk), bytearray()
                self._send(await loop.run_in_executor(None, recognition.feed, audio))
                continue
            # a flush: what was heard so far is final now
            audio, chunk = bytes(chunk), bytearray()
            self._send(await loop.run_in_executor(None, _feed_and_flush, recognition, audio))
        if chunk:
            self._send(await loop.run_in_executor(None, _feed_and_flush, recognition, bytes(chunk)))

    def _send(self, results: list[tuple[bool, str]]) -> None:
        for is_final, text in results:
            if not text:
                continue
            event_type = (
                stt.SpeechEventType.FINAL_TRANSCRIPT
                if is_final
                else stt.SpeechEventType.INTERIM_TRANSCRIPT
            )
            self._event_ch.send_nowait(
                stt.SpeechEvent(
                    type=event_type,
                    request_id=self._request_id,
                    alternatives=[
                        stt.SpeechData(language=self._owner.language, text=text, confidence=1.0)
                    ],
                )
            )


def _feed_and_flush(recognition: _Recognition, audio: bytes) -> list[tuple[bool, str]]:
    return recognition.feed(audio) + recognition.flush()
