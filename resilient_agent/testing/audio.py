"""Scripted audio in and out, with word and sentence markers carried inside the samples.

Every 10 ms frame of scripted speech carries a marker in its first samples: who speaks (user or
agent), which utterance or sentence, and which part of it. Markers live in the audio itself, so
they survive livekit's re-framing and vanish exactly where livekit replaces audio with silence
(protected speech, AEC warm-up): the scripted STT cannot transcribe what it never received, and
the scripted audio output knows which sentence a caller heard, when, and how far.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from livekit import rtc
from livekit.agents.voice.io import AudioInput, AudioOutput, AudioOutputCapabilities
from typing_extensions import override

from .schedule import delivery_wait

__all__ = [
    "FRAME_SAMPLES",
    "FRAME_SECONDS",
    "RECORDED_SPEECH_LEVEL",
    "SAMPLE_RATE",
    "AudioMarker",
    "CallerLine",
    "PlayedRun",
    "PlayedSegment",
    "PlayoutAudioOutput",
    "NoiseWindow",
    "ScriptedAudioInput",
    "SpeechWindow",
    "lab_frames_in",
    "marker_frame_samples",
    "marker_tone",
    "markers_in_bytes",
    "read_markers",
    "unmarked_frame",
    "without_marks",
    "word_frames",
]

SAMPLE_RATE = 16_000
FRAME_SECONDS = 0.01
FRAME_SAMPLES = int(SAMPLE_RATE * FRAME_SECONDS)

_MAGIC = 23_130  # never produced by the marker tone, whose amplitude stays below it
_TONE_AMPLITUDE = 3_000
_HEADER = 6
# a mark's word length no word reaches (below the magic number, which would read as a mark)
_NEVER_HEARD_FRAMES = 30_000
KIND_USER = 1
KIND_AGENT = 2
# the magic sample as the bytes of a frame carry it, and the header after it
_MAGIC_BYTES = np.array([_MAGIC], dtype=np.int16).tobytes()
_HEADER_LAYOUT = struct.Struct(f"={_HEADER}h")
_TONE = (np.sin(np.arange(FRAME_SAMPLES) * 2 * np.pi * 220 / SAMPLE_RATE) * _TONE_AMPLITUDE).astype(
    np.int16
)
# A low-gain line: the caller's voice reaches the agent at 1/15 of the usual level (about 100
# int16 RMS), under the 300 RMS many meters call "quiet", yet plainly speech.
_QUIET_GAIN = 1 / 15

CallerLine = Literal["marked", "quiet", "zeros", "recorded"]
"""What the caller's line carries, as livekit sees it.

``marked``: the caller's speech as marked frames the scripted VAD and STT hear (the default).
``quiet``: a low-gain line: the same speech at 1/15 of the level, with no markers in the samples;
``zeros``: frames of zeros, as livekit's own tests feed. On both, the scripted VAD and STT follow
the script by time instead of the samples (the way livekit's test fakes do): they hear what the
caller is saying whenever livekit feeds them a frame, so they suit race-free calls, not races
that depend on which frames livekit withholds.
``recorded``: a call's recorded audio (the caller's channel of livekit's recording). It has no
marks of its own: the lab stamps the utterances' word marks on the recording's frames that carry
speech (louder than :data:`RECORDED_SPEECH_LEVEL`) inside the utterances, so the scripted STT
transcribes the words whose recorded audio reached it, as on a marked line; the VAD hears the
recording's samples.
"""

RECORDED_SPEECH_LEVEL = 250.0
"""Mean ``|int16|`` over which a recorded frame is speech: Opus rings on for a few frames after
the lab's tone stops, at about a tenth of its level (a mean of about 2,000)."""


@dataclass(frozen=True)
class AudioMarker:
    """What one 10 ms slice of scripted audio belongs to.

    Attributes:
        kind: ``KIND_USER`` for caller speech, ``KIND_AGENT`` for synthesized agent speech.
        source_id: The utterance index (user) or sentence id (agent).
        part: The word index (user) or the frame index within the sentence (agent).
        frame_in_part: The frame index inside the word (user); 0 for agent audio.
        frames_in_part: Frames the word lasts (user) or the sentence lasts (agent).
    """

    kind: int
    source_id: int
    part: int
    frame_in_part: int
    frames_in_part: int


def marker_tone(sample_rate: int) -> np.ndarray:
    """One 10 ms frame of the marker tone at ``sample_rate`` (the lab's own is 16 kHz)."""
    samples = round(sample_rate * FRAME_SECONDS)
    return (np.sin(np.arange(samples) * 2 * np.pi * 220 / sample_rate) * _TONE_AMPLITUDE).astype(
        np.int16
    )


def marker_frame_samples(marker: AudioMarker, base: np.ndarray | None = None) -> np.ndarray:
    """Return one frame of int16 samples carrying ``marker`` (on a tone, or on ``base``)."""
    samples = (_TONE if base is None else base).copy()
    samples[:_HEADER] = (
        _MAGIC,
        marker.kind,
        marker.source_id,
        marker.part,
        marker.frame_in_part,
        marker.frames_in_part,
    )
    return samples


def read_markers(data: np.ndarray) -> list[AudioMarker]:
    """Find every marker in a block of int16 samples, in order."""
    return markers_in_bytes(data.tobytes())


def frame_markers(frame: rtc.AudioFrame) -> list[AudioMarker]:
    """Markers carried by a livekit audio frame."""
    return markers_in_bytes(frame.data.tobytes())


def markers_in_bytes(raw: bytes) -> list[AudioMarker]:
    """Find every marker in the bytes of int16 samples (native order), in order.

    Every frame of a call passes through here, most of them silent: a byte search finds the
    magic sample far sooner than array arithmetic on a 10 ms frame does.
    """
    found: list[AudioMarker] = []
    last = len(raw) - _HEADER_LAYOUT.size  # the last offset a whole header fits after
    pos = raw.find(_MAGIC_BYTES)
    while pos >= 0:
        # only a sample boundary starts a sample: the magic bytes may straddle two samples
        if pos % 2 == 0 and pos <= last:
            _, kind, source_id, part, frame_in_part, frames_in_part = _HEADER_LAYOUT.unpack_from(
                raw, pos
            )
            if kind in (KIND_USER, KIND_AGENT):
                found.append(AudioMarker(kind, source_id, part, frame_in_part, frames_in_part))
        pos = raw.find(_MAGIC_BYTES, pos + 1)
    return found


def without_marks(samples: np.ndarray) -> np.ndarray:
    """``samples`` (int16) with every marker's header replaced by the line it interrupts.

    A marker's magic sample is a click in every 10 ms frame (a 100 Hz buzz at half of full
    scale) that a real VAD hears: livekit's Silero takes marked speech for less speech than the
    voice alone, and marked silence for some. What a production VAD and recorder get of the
    caller is the voice: each header's samples become a straight line from the sample before
    it to the one after it (0.4 ms at 16 kHz, below what a VAD or a codec resolves).
    """
    raw = samples.tobytes()
    last = len(raw) - _HEADER_LAYOUT.size
    starts: list[int] = []
    pos = raw.find(_MAGIC_BYTES)
    while pos >= 0:
        marked = pos % 2 == 0 and pos <= last
        if marked and _HEADER_LAYOUT.unpack_from(raw, pos)[1] in (KIND_USER, KIND_AGENT):
            starts.append(pos // 2)
        pos = raw.find(_MAGIC_BYTES, pos + 1)
    if not starts:
        return samples
    voice = samples.astype(np.float64)
    steps = np.arange(1, _HEADER + 1) / (_HEADER + 1)
    for start in starts:
        before = voice[start - 1] if start > 0 else 0.0
        after = voice[start + _HEADER] if start + _HEADER < len(voice) else 0.0
        voice[start : start + _HEADER] = before + (after - before) * steps
    return voice.astype(np.int16)


def unmarked_frame(frame: rtc.AudioFrame) -> rtc.AudioFrame:
    """``frame`` without its markers (:func:`without_marks`), itself when it has none."""
    samples = np.frombuffer(frame.data, dtype=np.int16)
    voice = without_marks(samples)
    if voice is samples:
        return frame
    return rtc.AudioFrame(
        data=voice.tobytes(),
        sample_rate=frame.sample_rate,
        num_channels=frame.num_channels,
        samples_per_channel=frame.samples_per_channel,
    )


def _pause_marker(window: SpeechWindow) -> AudioMarker:
    """A mark with no word: a word past the utterance's last, too long to ever be recognised."""
    return AudioMarker(KIND_USER, window.index, len(window.words), 0, _NEVER_HEARD_FRAMES)


@dataclass(frozen=True)
class SpeechWindow:
    """One user utterance as audio: when it starts and ends, and its words.

    Attributes:
        index: The utterance index, unique within a scenario.
        start: Seconds from the start of the call.
        end: Seconds from the start of the call.
        words: The words, spread evenly over the window.
        samples: Optional real speech (int16, 16 kHz) to play instead of a marker tone.
        marked: Whether its frames carry word markers (the scripted STT and VAD faults read
            them); real-speech runs play the recording untouched, as a real recognizer hears it.
    """

    index: int
    start: float
    end: float
    words: tuple[str, ...]
    samples: np.ndarray | None = None
    marked: bool = True


@dataclass(frozen=True)
class NoiseWindow:
    """Background noise on the caller's line (a TV, a fan): loud audio with no words in it.

    Attributes:
        start: Seconds from the start of the call.
        end: Seconds from the start of the call.
        rms: Loudness, int16 RMS (speech tones are about 2,100).
    """

    start: float
    end: float
    rms: float = 1_500.0


def noise_frame(rms: float, frame_index: int) -> np.ndarray:
    """One deterministic frame of noise: no marker, so the STT hears no words in it."""
    rng = np.random.default_rng(frame_index)
    samples = rng.normal(0.0, rms, FRAME_SAMPLES)
    # a sample equal to the marker's magic number would read as a word
    return np.clip(samples, -_MAGIC + 1, _MAGIC - 1).astype(np.int16)


def word_frames(total_frames: int, n_words: int, frame: int) -> tuple[int, int, int]:
    """Which word an utterance's ``frame`` belongs to, and that word's first and end frames.

    The words of an utterance of ``total_frames`` frames are spread evenly over it.
    """
    n_words = max(1, n_words)
    word = min(frame * n_words // total_frames, n_words - 1)
    return word, -(-word * total_frames // n_words), -(-(word + 1) * total_frames // n_words)


def lab_frames_in(frame_s: float) -> int:
    """How many of the lab's 10 ms frames make one frame of ``frame_s`` seconds.

    Raises:
        ValueError: ``frame_s`` is not a whole number of them.
    """
    parts = round(frame_s / FRAME_SECONDS)
    if parts < 1 or abs(parts * FRAME_SECONDS - frame_s) > 1e-9:
        raise ValueError(f"frame_s={frame_s}: use a whole number of {FRAME_SECONDS} s lab frames")
    return parts


class _LineSamples:
    """The samples the caller's line carries at each of the lab's 10 ms frames.

    Apart from the input that sends them: the session's observation gives the input a class of
    its own while it is observed, and CPython 3.11 then looks every method called on the input
    up the slow way; RoomIO's input calls none per frame (it reads its channel), so neither does
    the lab's.
    """

    def __init__(
        self,
        windows: Sequence[SpeechWindow],
        noise: Sequence[NoiseWindow],
        line: CallerLine,
        recording: np.ndarray | None,
    ) -> None:
        # a ``recorded`` line's audio: int16 at the lab's rate from the call's second 0
        self.recording = recording
        self._speech: list[tuple[SpeechWindow, dict[int, int]]] | None = None
        self.line: CallerLine = line
        self.windows = sorted(windows, key=lambda w: w.start)
        self.noise = tuple(noise)
        self.silence = np.zeros(FRAME_SAMPLES, dtype=np.int16)

    def script_samples(self, frame_index: int) -> np.ndarray:
        """The marked samples the script has the caller produce in a frame."""
        t = frame_index * FRAME_SECONDS + FRAME_SECONDS / 2
        for window in self.windows:
            if window.start <= t < window.end:
                return _speech_samples(window, t)
        for noise in self.noise:
            if noise.start <= t < noise.end:
                return noise_frame(noise.rms, frame_index)
        return self.silence

    def line_samples(self, frame_index: int) -> np.ndarray:
        """The samples the line carries in a frame (the script's, as the line passes them)."""
        if self.line == "zeros":
            return self.silence
        if self.line == "recorded":
            return self._recorded_samples(frame_index)
        samples = self.script_samples(frame_index)
        if self.line == "quiet":
            if samples is self.silence:
                return samples
            voice = samples.copy()
            if voice[0] == _MAGIC:
                voice[:_HEADER] = _TONE[:_HEADER]  # a low-gain line carries the voice, no marker
            return (voice * _QUIET_GAIN).astype(np.int16)
        return samples

    def _recorded_samples(self, frame_index: int) -> np.ndarray:
        """A recorded line's frame: the recording, with the word marks where it has speech."""
        if self.recording is None:
            return self.silence
        chunk = self._recorded_frame(frame_index)
        t = frame_index * FRAME_SECONDS + FRAME_SECONDS / 2
        for window, voiced in self._recorded_speech():
            if frame_index in voiced:
                # the words spread over the window's speech, not its silences
                at = voiced[frame_index]
                word, first, last = word_frames(len(voiced), len(window.words), at)
                marker = AudioMarker(KIND_USER, window.index, word, at - first, last - first)
                return marker_frame_samples(marker, chunk)
            if window.start <= t < window.end:
                # a pause inside the utterance is marked as the lab marks its own (no word in it)
                return marker_frame_samples(_pause_marker(window), chunk)
        return chunk

    def _recorded_frame(self, frame_index: int) -> np.ndarray:
        assert self.recording is not None
        start = frame_index * FRAME_SAMPLES
        chunk = self.recording[start : start + FRAME_SAMPLES]
        if len(chunk) < FRAME_SAMPLES:
            chunk = np.concatenate([chunk, self.silence[: FRAME_SAMPLES - len(chunk)]])
        return chunk

    def _recorded_speech(self) -> list[tuple[SpeechWindow, dict[int, int]]]:
        """Each window with its recorded speech frames: frame index to its rank among them.

        A window that runs past the recording's end was still being said when the recorder
        stopped (the session closed): its frames there count as speech, so its words go on
        past the end as they were said.
        """
        if self._speech is None:
            assert self.recording is not None
            self._speech = []
            recorded = len(self.recording) // FRAME_SAMPLES
            for window in self.windows:
                first = round(window.start / FRAME_SECONDS)
                last = round(window.end / FRAME_SECONDS)
                voiced = [
                    i
                    for i in range(first, last)
                    if i >= recorded
                    or np.abs(self._recorded_frame(i).astype(np.int32)).mean()
                    > RECORDED_SPEECH_LEVEL
                ]
                self._speech.append((window, {i: rank for rank, i in enumerate(voiced)}))
        return self._speech


def _speech_samples(window: SpeechWindow, t: float) -> np.ndarray:
    total_frames = max(1, round((window.end - window.start) / FRAME_SECONDS))
    frame = min(int((t - window.start) / FRAME_SECONDS), total_frames - 1)
    word, first, last = word_frames(total_frames, len(window.words), frame)
    base = None
    if window.samples is not None:
        chunk = window.samples[frame * FRAME_SAMPLES : (frame + 1) * FRAME_SAMPLES]
        if len(chunk) == FRAME_SAMPLES:
            base = chunk
    if not window.marked:
        return base if base is not None else np.zeros(FRAME_SAMPLES, dtype=np.int16)
    marker = AudioMarker(KIND_USER, window.index, word, frame - first, last - first)
    return marker_frame_samples(marker, base)


class ScriptedAudioInput(AudioInput):
    """A microphone that plays the user's speech windows as 10 ms frames on the loop clock.

    ``frame_s`` sends longer frames, each a whole number of the lab's 10 ms frames joined (RoomIO
    sends 50 ms frames by default): the same samples, fewer and larger frames.
    """

    def __init__(
        self,
        windows: Sequence[SpeechWindow],
        *,
        duration: float,
        noise: Sequence[NoiseWindow] = (),
        line: CallerLine = "marked",
        frame_s: float = FRAME_SECONDS,
        recording: np.ndarray | None = None,
    ) -> None:
        super().__init__(label="ScriptedAudioInput")
        self._samples = _LineSamples(windows, noise, line, recording)
        self._parts = lab_frames_in(frame_s)
        self._total_frames = round(duration / FRAME_SECONDS)
        self._next_frame = 0
        self._started_at: float | None = None
        self.frames_sent = 0

    @property
    def line(self) -> CallerLine:
        """What the line passes of the caller's voice."""
        return self._samples.line

    def script_at(self, now: float) -> np.ndarray:
        """The marked samples the caller produces at loop time ``now`` (what the script says).

        The scripted VAD and STT listen here instead of to the samples on ``quiet`` and
        ``zeros`` lines.
        """
        if self._started_at is None:
            return self._samples.silence
        index = int((now - self._started_at) / FRAME_SECONDS + 1e-6) - 1
        return self._samples.script_samples(max(index, 0))

    async def __anext__(self) -> rtc.AudioFrame:
        loop = asyncio.get_running_loop()
        if self._started_at is None:
            self._started_at = loop.time()
        first = self._next_frame
        if first >= self._total_frames:
            raise StopAsyncIteration
        parts = min(self._parts, self._total_frames - first)
        # frames are produced in real time: frame n is ready once n+1 frames have elapsed
        due = self._started_at + (first + parts) * FRAME_SECONDS
        wait = delivery_wait("caller_audio", due - loop.time())
        if wait > 0:
            await asyncio.sleep(wait)
        line = self._samples
        if parts == 1:
            samples = line.line_samples(first)
        else:
            samples = np.concatenate([line.line_samples(i) for i in range(first, first + parts)])
        self._next_frame = first + parts
        self.frames_sent += 1
        return rtc.AudioFrame(
            data=samples.tobytes(),
            sample_rate=SAMPLE_RATE,
            num_channels=1,
            samples_per_channel=len(samples),
        )


@dataclass
class PlayedSegment:
    """One playout segment (usually one speech generation) as the caller heard it.

    Attributes:
        started_at: Session seconds when its first audio played, None if nothing played.
        ended_at: Session seconds when playout finished or was cut.
        pushed: Seconds of audio livekit pushed into the segment.
        played: Seconds of audio that actually played.
        interrupted: Whether the buffer was cleared before it played out.
        sentences: Sentence id to (start offset in the segment, seconds heard, seconds long).
        runs: The stretches the caller actually heard, in order: a pause (livekit's, or a
            middleware's) ends one run and a resume begins the next.
    """

    started_at: float | None = None
    ended_at: float | None = None
    pushed: float = 0.0
    played: float = 0.0
    interrupted: bool = False
    sentences: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    runs: list[PlayedRun] = field(default_factory=list)
    _layout: list[tuple[float, AudioMarker]] = field(default_factory=list, repr=False)

    def time_at(self, offset: float) -> float | None:
        """Session seconds when the audio at ``offset`` into the segment played, None if never."""
        for run in self.runs:
            if run.offset <= offset < run.offset + run.duration:
                return run.started_at + offset - run.offset
        return None

    def heard_between(self, start: float, end: float) -> float:
        """Seconds of this segment's audio that played between session times ``start``-``end``."""
        heard = 0.0
        for run in self.runs:
            heard += max(0.0, min(end, run.ended_at) - max(start, run.started_at))
        return heard


@dataclass(frozen=True)
class PlayedRun:
    """One stretch of a segment that played without a pause.

    Attributes:
        started_at: Session seconds when it began to play.
        offset: Where it begins in the segment's audio, in seconds.
        duration: Seconds of audio it played.
    """

    started_at: float
    offset: float
    duration: float

    @property
    def ended_at(self) -> float:
        """Session seconds when it stopped playing."""
        return self.started_at + self.duration


class PlayoutAudioOutput(AudioOutput):
    """A speaker that plays pushed audio on the loop clock, like RoomIO's audio output.

    It supports pause/resume and ``clear_buffer``, reports ``playback_finished`` exactly once per
    segment, and records which marked sentences played and how far (:attr:`segments`).

    With ``reports_cleared_playout=False`` it reproduces a sink whose report is lost after
    ``clear_buffer``: the audio stops and the next segment plays, but livekit never hears that
    the cleared one finished.

    ``on_resumed`` is called, synchronously inside ``resume()``, each time a segment whose audio
    already began plays again after a pause (a new run of :attr:`PlayedSegment.runs` opens).
    """

    def __init__(
        self,
        *,
        can_pause: bool = True,
        clock: Callable[[], float] | None = None,
        on_segment_done: Callable[[PlayedSegment], None] | None = None,
        on_resumed: Callable[[], None] | None = None,
        reports_cleared_playout: bool = True,
        sample_rate: int = SAMPLE_RATE,
    ) -> None:
        super().__init__(
            label="PlayoutAudioOutput",
            next_in_chain=None,
            # the rate the agent's audio arrives at, so livekit never resamples (the marks)
            sample_rate=sample_rate,
            capabilities=AudioOutputCapabilities(pause=can_pause),
        )
        self._clock = clock or (lambda: time.time())
        self._on_segment_done = on_segment_done
        self._on_resumed = on_resumed
        self._reports_cleared_playout = reports_cleared_playout
        self.segments: list[PlayedSegment] = []
        self._segment: PlayedSegment | None = None
        self._play_started: float | None = None
        self._paused_at: float | None = None
        self._paused_total = 0.0
        self._flushed = False
        self._finish_timer: asyncio.TimerHandle | None = None
        self._segment_finished = asyncio.Event()
        self._run: tuple[float, float] | None = None  # (started_at, offset) of the open run

    def _played(self) -> float:
        if self._play_started is None or self._segment is None:
            return 0.0
        end = self._paused_at if self._paused_at is not None else self._clock()
        return min(max(end - self._play_started - self._paused_total, 0.0), self._segment.pushed)

    @override
    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        await super().capture_frame(frame)
        while self._flushed and self._segment is not None:
            # like RoomIO, the next segment waits for the flushed one to play out (or be cleared)
            self._segment_finished.clear()
            await self._segment_finished.wait()
        if self._segment is None:
            self._segment = PlayedSegment()
            self.segments.append(self._segment)
        segment = self._segment
        data = np.frombuffer(frame.data, dtype=np.int16)
        offset = segment.pushed
        for pos in np.flatnonzero(data == _MAGIC):
            found = read_markers(data[pos : pos + _HEADER])
            if found:
                segment._layout.append((offset + float(pos) / frame.sample_rate, found[0]))
        segment.pushed += frame.duration
        if self._play_started is None and self._paused_at is None:
            self._play_started = self._clock()
            segment.started_at = self._play_started
            self._run = (self._play_started, 0.0)
            # loop time, where livekit documents a wall-clock stamp: the honest stamp changes
            # a handoff-drain call (docs/lab.md, 'Known gaps of the fakes')
            self.on_playback_started(created_at=self._play_started)

    @override
    def flush(self) -> None:
        super().flush()
        if self._segment is None or self._segment.pushed == 0:
            return
        self._flushed = True
        self._arm_finish()

    def _arm_finish(self) -> None:
        if self._finish_timer is not None:
            self._finish_timer.cancel()
            self._finish_timer = None
        if self._paused_at is not None or self._segment is None:
            return
        remaining = max(self._segment.pushed - self._played(), 0.0)
        self._finish_timer = asyncio.get_running_loop().call_later(remaining, self._finish, False)

    def _close_run(self, played_to: float) -> None:
        if self._run is None or self._segment is None:
            return
        started_at, offset = self._run
        self._run = None
        if played_to > offset:
            self._segment.runs.append(PlayedRun(started_at, offset, played_to - offset))

    def _finish(self, interrupted: bool) -> None:
        segment = self._segment
        if segment is None:
            return
        played = segment.pushed if not interrupted else self._played()
        self._close_run(played)
        if self._finish_timer is not None:
            self._finish_timer.cancel()
            self._finish_timer = None
        segment.played = played
        segment.interrupted = interrupted
        segment.ended_at = self._clock()
        segment.sentences = _heard_sentences(segment._layout, played)
        self._segment = None
        self._play_started = None
        self._paused_at = None
        self._paused_total = 0.0
        self._flushed = False
        self._segment_finished.set()
        if self._reports_cleared_playout or not interrupted:
            self.on_playback_finished(
                playback_position=played, interrupted=interrupted, synchronized_transcript=None
            )
        if self._on_segment_done is not None:
            self._on_segment_done(segment)

    @override
    def clear_buffer(self) -> None:
        if self._segment is None:
            return
        self._finish(True)

    @override
    def pause(self) -> None:
        super().pause()
        if self._paused_at is None:
            self._close_run(self._played())
            self._paused_at = self._clock()
        if self._finish_timer is not None:
            self._finish_timer.cancel()
            self._finish_timer = None

    @override
    def resume(self) -> None:
        super().resume()
        if self._paused_at is not None:
            if self._play_started is not None:
                self._paused_total += self._clock() - self._paused_at
            self._paused_at = None
            if self._play_started is not None:
                self._run = (self._clock(), self._played())
                if self._on_resumed is not None:
                    self._on_resumed()
        if self._play_started is None and self._segment is not None and self._segment.pushed:
            self._play_started = self._clock()
            self._segment.started_at = self._play_started
            self._run = (self._play_started, 0.0)
            # loop time, where livekit documents a wall-clock stamp: the honest stamp changes
            # a handoff-drain call (docs/lab.md, 'Known gaps of the fakes')
            self.on_playback_started(created_at=self._play_started)
        if self._flushed:
            self._arm_finish()

    @property
    def playing(self) -> Literal["idle", "playing", "paused"]:
        """Whether the caller currently hears agent audio."""
        if self._segment is None or self._play_started is None:
            return "idle"
        return "paused" if self._paused_at is not None else "playing"


def _heard_sentences(
    layout: list[tuple[float, AudioMarker]], played: float
) -> dict[int, tuple[float, float, float]]:
    sentences: dict[int, tuple[float, float, float]] = {}
    for offset, marker in layout:
        length = marker.frames_in_part * FRAME_SECONDS
        start, heard, _ = sentences.get(marker.source_id, (float(offset), 0.0, length))
        if offset < played:
            heard = min(heard + FRAME_SECONDS, length)
        sentences[marker.source_id] = (start, heard, length)
    return sentences
