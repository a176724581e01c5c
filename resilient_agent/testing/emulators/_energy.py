"""What a realtime emulator hears when the lab's word marks did not survive: speech by energy.

livekit-plugins-openai resamples the caller's 16 kHz audio to 24 kHz before it sends it, and the
resampler blends the samples that carry the lab's word marks (:mod:`._hearing` reads none after
it). What survives is the audio itself: the lab's caller speaks a tone and is silent (zeros)
between utterances, and livekit replaces the audio the model must not hear with silence. So
:class:`EnergyListener` hears speech where a 10 ms frame of the received PCM is louder than
:data:`SPEECH_RMS`, and names the words by where that frame lies in the caller's line:

- the lab hands it the scenario's utterances by their span on the line (call seconds), each
  word's span as the lab's caller audio lays it (:class:`ScheduledUtterance`);
- a connection's audio clock is pinned to the line by the least lag seen between the audio
  received and the call's clock (``line_offset``): audio sent in real time, or held and sent
  later whole (a hold catches up), keeps that lag, and a burst is placed once it is all in;
- a loud frame counts for the word whose span holds its place on the line, and a word is
  recognised once at least half of its frames were heard loud (the scripted STT's rule).

It transcribes only audio that reached it: a span the plugin never sent, or sent as silence, is
not heard. Loud audio outside every utterance (noise) is speech with no words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..audio import word_frames
from ..stt import HeardWord
from ._hearing import FrameHeard, TimedWord

__all__ = ["SPEECH_RMS", "EnergyListener", "ScheduledUtterance"]

SPEECH_RMS = 200.0
"""A frame louder than this (int16 RMS) is speech; the lab's speech tone is about 2,100."""

_FRAME_SECONDS = 0.01


@dataclass(frozen=True)
class ScheduledUtterance:
    """One utterance of the caller's line: where it lies, and its words spread evenly over it.

    Attributes:
        index: The utterance's index in its scenario.
        start: Call seconds at which it starts on the line.
        end: Call seconds at which it ends.
        words: Its words, in order.
    """

    index: int
    start: float
    end: float
    words: tuple[str, ...]

    @property
    def frames(self) -> int:
        """How many 10 ms frames it lasts."""
        return max(1, round((self.end - self.start) / _FRAME_SECONDS))

    def word_at(self, t: float) -> tuple[int, int] | None:
        """The word spoken at line time ``t`` and how many frames it lasts; None outside."""
        if not self.start <= t < self.end or not self.words:
            return None
        frame = min(int((t - self.start) / _FRAME_SECONDS), self.frames - 1)
        word, first, last = word_frames(self.frames, len(self.words), frame)
        return word, last - first


@dataclass
class EnergyListener:
    """Hears speech by energy in PCM16 mono bytes and names its words by their line position.

    Attributes:
        utterances: The caller's utterances on the line.
        clock: The call's clock (seconds), the one the utterances' spans are on.
        sample_rate: The rate of the PCM received.
        frames: Frames heard so far (the connection's audio clock, in 10 ms).
        line_offset: Call seconds at which the connection's audio began, as far as known.
    """

    utterances: Sequence[ScheduledUtterance]
    clock: Callable[[], float]
    sample_rate: int = 24_000
    frames: int = 0
    line_offset: float = float("inf")
    _received: int = 0
    _pending: bytes = b""
    _counts: dict[tuple[int, int], int] = field(default_factory=dict)
    _heard: set[tuple[int, int]] = field(default_factory=set)

    @property
    def frame_seconds(self) -> float:
        """Seconds one frame lasts (10 ms)."""
        return _FRAME_SECONDS

    @property
    def seconds(self) -> float:
        """Seconds of audio heard so far."""
        return self.frames * _FRAME_SECONDS

    def receive(self, data: bytes) -> None:
        """Take ``data`` in, now: it is heard at the next :meth:`hear`."""
        self._pending += data
        self._received += len(data)
        received_s = self._received / 2 / self.sample_rate
        # the audio can arrive late (held, then sent whole), never early: the least lag is the
        # one that places it on the line
        self.line_offset = min(self.line_offset, self.clock() - received_s)

    def hear(self) -> list[FrameHeard]:
        """Every whole frame received and not heard yet."""
        frame_bytes = self.sample_rate // 100 * 2
        whole = len(self._pending) - len(self._pending) % frame_bytes
        samples = np.frombuffer(self._pending[:whole], dtype=np.int16)
        self._pending = self._pending[whole:]
        return [
            self._frame(samples[start : start + frame_bytes // 2])
            for start in range(0, len(samples), frame_bytes // 2)
        ]

    def forget_words(self) -> None:
        """Start counting words afresh (the input buffer was committed or cleared)."""
        self._counts.clear()
        self._heard.clear()

    def _frame(self, samples: np.ndarray) -> FrameHeard:
        self.frames += 1
        end = round(self.frames * _FRAME_SECONDS, 3)
        rms = float(np.sqrt(np.mean(samples.astype(np.float64) ** 2))) if len(samples) else 0.0
        if rms <= SPEECH_RMS:
            return FrameHeard(end, False)
        at = self.line_offset + end - _FRAME_SECONDS / 2
        for utterance in self.utterances:
            placed = utterance.word_at(at)
            if placed is None:
                continue
            word, frames = placed
            key = (utterance.index, word)
            count = self._counts.get(key, 0) + 1
            self._counts[key] = count
            if key in self._heard or count * 2 < frames:
                break
            self._heard.add(key)
            start = round(end - count * _FRAME_SECONDS, 3)
            heard = HeardWord(utterance.index, word, utterance.words[word])
            return FrameHeard(end, True, (TimedWord(heard, start, end),))
        return FrameHeard(end, True)
