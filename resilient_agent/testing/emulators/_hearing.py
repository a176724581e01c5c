"""What an STT emulator hears in the PCM that reached it: the lab's marked caller words.

The lab's caller audio carries, in every 10 ms frame, which word of which utterance it belongs to
(:mod:`resilient_agent.testing.audio`). An emulator decodes the same marks from the bytes its
socket or request received, so it transcribes exactly the audio the plugin sent: frames livekit
replaced with silence carry no mark and their words are not heard, as with the scripted STT. A
word is recognised once at least half of its frames arrived.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..audio import KIND_USER, read_markers
from ..stt import HeardWord

__all__ = ["FrameHeard", "MarkedListener", "TimedWord"]

WordLookup = Callable[[int, int], str]


@dataclass(frozen=True)
class TimedWord:
    """A recognised word and where it lies in the audio of its connection.

    Attributes:
        word: The word, traced to its utterance.
        start: Seconds of audio before its first frame.
        end: Seconds of audio at the end of its marked span.
    """

    word: HeardWord
    start: float
    end: float


@dataclass(frozen=True)
class FrameHeard:
    """One 10 ms frame as the emulator heard it.

    Attributes:
        end: Seconds of audio received on the connection up to the end of this frame.
        speech: Whether the frame carries caller speech.
        recognised: Words this frame completed.
    """

    end: float
    speech: bool
    recognised: tuple[TimedWord, ...] = ()


@dataclass
class MarkedListener:
    """Decodes marked caller words from PCM16 mono bytes, frame by frame, in order."""

    word_lookup: WordLookup
    sample_rate: int = 16_000
    frames: int = 0
    _carry: bytes = b""
    _counts: dict[tuple[int, int], int] = field(default_factory=dict)
    _first: dict[tuple[int, int], int] = field(default_factory=dict)
    _heard: set[tuple[int, int]] = field(default_factory=set)

    @property
    def frame_seconds(self) -> float:
        """Seconds one frame lasts (10 ms)."""
        return 0.01

    @property
    def seconds(self) -> float:
        """Seconds of audio heard so far."""
        return self.frames * self.frame_seconds

    def hear(self, data: bytes) -> list[FrameHeard]:
        """Every whole frame in ``data`` (after what was left over from the last call)."""
        frame_bytes = self.sample_rate // 100 * 2
        data = self._carry + data
        whole = len(data) - len(data) % frame_bytes
        self._carry = data[whole:]
        samples = np.frombuffer(data[:whole], dtype=np.int16)
        return [
            self._frame(samples[start : start + frame_bytes // 2])
            for start in range(0, len(samples), frame_bytes // 2)
        ]

    def _frame(self, samples: np.ndarray) -> FrameHeard:
        index = self.frames
        self.frames += 1
        end = self.frames * self.frame_seconds
        markers = [m for m in read_markers(samples) if m.kind == KIND_USER]
        recognised = []
        for marker in markers:
            key = (marker.source_id, marker.part)
            self._first.setdefault(key, index - marker.frame_in_part)
            count = self._counts.get(key, 0) + 1
            self._counts[key] = count
            if key not in self._heard and count * 2 >= marker.frames_in_part:
                self._heard.add(key)
                start = max(0, self._first[key]) * self.frame_seconds
                recognised.append(
                    TimedWord(
                        HeardWord(key[0], key[1], self.word_lookup(*key)),
                        round(start, 3),
                        round(start + marker.frames_in_part * self.frame_seconds, 3),
                    )
                )
        return FrameHeard(round(end, 3), bool(markers), tuple(recognised))
