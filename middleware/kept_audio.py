"""Caller audio kept as samples; frames rebuilt, sample for sample, only when read.

A 10 ms ``rtc.AudioFrame`` costs about twice its 320 bytes of samples in Python objects (the
frame, its attribute dict, its userdata dict, its buffer, the record stamping it). The tap hands
:class:`KeptAudio` the frames that passed since its last recheck (every 50 ms) and they become one
chunk: their samples joined in one ``bytes``, their arrival times in an ``array``, their format
once when they share it (nearly always), and the one withheld flag they share (the tap changes it
only at a recheck). A recovery reads a window rarely; its frames are rebuilt then.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter

from livekit import rtc

from resilient_agent._compat import joined_samples

__all__ = ["KeptAudio", "TappedFrame"]

# (sample_rate, num_channels, samples_per_channel, bytes): a frame besides its samples
_Format = tuple[int, int, int, int]
_FORMAT_OF = attrgetter("sample_rate", "num_channels", "samples_per_channel")
_SAMPLE_BYTES = 2  # livekit's frames are 16-bit PCM


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


class _Chunk:
    """Frames that passed between two rechecks: samples, times, format(s), withheld flag.

    ``formats`` holds one format shared by every frame, or one per frame.
    """

    __slots__ = ("formats", "samples", "times", "withheld")

    def __init__(
        self, times: array[float], samples: bytes, formats: tuple[_Format, ...], withheld: bool
    ) -> None:
        self.times = times
        self.samples = samples
        self.formats = formats
        self.withheld = withheld

    def format(self, index: int) -> _Format:
        formats = self.formats
        return formats[index] if len(formats) > 1 else formats[0]

    def offset(self, index: int) -> int:
        """Where frame ``index``'s samples begin."""
        formats = self.formats
        if len(formats) > 1:
            return sum(f[3] for f in formats[:index])
        return index * formats[0][3]

    def since(self, index: int) -> _Chunk:
        """The frames from ``index`` on, as a chunk of their own."""
        formats = self.formats if len(self.formats) == 1 else self.formats[index:]
        return _Chunk(
            self.times[index:], self.samples[self.offset(index) :], formats, self.withheld
        )

    def until(self, index: int) -> _Chunk:
        """The frames before ``index``, as a chunk of their own."""
        formats = self.formats if len(self.formats) == 1 else self.formats[:index]
        return _Chunk(
            self.times[:index], self.samples[: self.offset(index)], formats, self.withheld
        )

    def seconds(self) -> float:
        if len(self.formats) > 1:
            return sum(spc / rate for rate, _, spc, _ in self.formats)
        rate, _, spc, _ = self.formats[0]
        return len(self.times) * spc / rate

    def tapped(self, start: float, end: float) -> Iterator[TappedFrame]:
        """Its frames that passed between ``start`` and ``end``, rebuilt."""
        times, samples, withheld = self.times, self.samples, self.withheld
        first, stop = bisect_left(times, start), bisect_right(times, end)
        offset = self.offset(first)
        for index in range(first, stop):
            rate, channels, spc, size = self.format(index)
            data = samples[offset : offset + size]
            offset += size
            yield TappedFrame(times[index], rtc.AudioFrame(data, rate, channels, spc), withheld)


class KeptAudio:
    """Frames of caller audio in arrival order, as chunks of samples."""

    __slots__ = ("_chunks", "_shared_format")

    def __init__(self) -> None:
        self._chunks: deque[_Chunk] = deque()
        # the last chunk's format when all its frames shared it: the next chunk shares the tuple
        self._shared_format: tuple[_Format, ...] = ()

    def add(self, frames: Sequence[rtc.AudioFrame], times: Sequence[float], withheld: bool) -> None:
        """Keep ``frames`` (non-empty, passed at ``times``, in order) as one chunk."""
        samples = joined_samples(frames)
        formats = list(map(_FORMAT_OF, frames))
        rate, channels, spc = first = formats[0]
        size = _SAMPLE_BYTES * channels * spc
        # a frame's buffer may be longer than its samples: equal lengths only when none is
        if formats.count(first) == len(formats) and len(samples) == size * len(formats):
            shared = self._shared_format
            if not shared or shared[0] != (rate, channels, spc, size):
                shared = self._shared_format = ((rate, channels, spc, size),)
            layout = shared
        else:
            layout = tuple(
                (*fmt, frame.data.nbytes) for fmt, frame in zip(formats, frames, strict=True)
            )
        self._chunks.append(_Chunk(array("d", times), samples, layout, withheld))

    def trim(self, needed_from: float, oldest_kept: float) -> None:
        """Drop frames older than ``oldest_kept``, and chunks that passed before ``needed_from``.

        A chunk part of which passed at or after ``needed_from`` is kept whole (at most one
        recheck's frames more); ``oldest_kept`` is a hard bound.
        """
        chunks = self._chunks
        while chunks and chunks[0].times[-1] < needed_from:
            chunks.popleft()
        while chunks and chunks[0].times[0] < oldest_kept:
            head = chunks.popleft()
            index = bisect_left(head.times, oldest_kept)
            if index < len(head.times):
                chunks.appendleft(head.since(index))

    def put_in_front(self, earlier: KeptAudio) -> None:
        """Put the frames of ``earlier`` that passed before this one's first frame in front."""
        first = self._chunks[0].times[0] if self._chunks else float("inf")
        taken: list[_Chunk] = []
        for chunk in earlier._chunks:
            if chunk.times[0] >= first:
                break
            index = bisect_left(chunk.times, first)
            taken.append(chunk if index == len(chunk.times) else chunk.until(index))
        self._chunks.extendleft(reversed(taken))

    def window(self, start: float, end: float) -> list[TappedFrame]:
        """The frames that passed between ``start`` and ``end`` (loop time), rebuilt."""
        found: list[TappedFrame] = []
        for chunk in self._overlapping(start, end):
            found.extend(chunk.tapped(start, end))
        return found

    def withheld_within(self, start: float, end: float) -> bool:
        """Whether livekit withheld any frame that passed between ``start`` and ``end``."""
        for chunk in self._overlapping(start, end):
            if chunk.withheld:
                times = chunk.times
                index = bisect_left(times, start)
                if index < len(times) and times[index] <= end:
                    return True
        return False

    @property
    def seconds(self) -> float:
        """Seconds of audio kept."""
        return sum(chunk.seconds() for chunk in self._chunks)

    def _overlapping(self, start: float, end: float) -> list[_Chunk]:
        """The chunks with time in common with ``start``-``end``, in order (newest are read)."""
        found: list[_Chunk] = []
        for chunk in reversed(self._chunks):
            if chunk.times[-1] < start:
                break
            if chunk.times[0] <= end:
                found.append(chunk)
        found.reverse()
        return found
