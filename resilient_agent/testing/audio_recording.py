"""A call's audio as livekit's own recorder writes it (``session.start(record=True)``).

In production livekit-agents wraps the session's audio input and output in a
:class:`~livekit.agents.voice.recorder_io.RecorderIO` and writes ``audio.ogg`` in the job's
session directory: Ogg Opus, stereo, 48 kHz, the caller's input on channel 0 where it arrived and
the agent's audio on channel 1 where it played, both on one timeline whose sample 0 is
``RecorderIO.recording_started_at`` (``time.time()`` when the recorder started; the report's
``audio_recording_started_at``). The lab has no job to do it, so it drives the same recorder
itself around the session (:func:`start_audio_recording`); on the virtual clock ``time.time()``
is the call's, so the file's timeline is the call's.

:func:`caller_channel` reads such a file back: the caller's channel at the lab's 16 kHz.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from livekit import rtc
from livekit.agents.voice.io import AudioInput
from livekit.agents.voice.recorder_io import RecorderIO
from typing_extensions import override

from .._livekit.compat import place_played_audio
from .audio import SAMPLE_RATE, unmarked_frame
from .clock import virtual_wall_time

__all__ = [
    "AGENT_CHANNEL",
    "CALLER_CHANNEL",
    "RECORDING_CHANNELS",
    "AudioRecording",
    "CallerRecording",
    "RecorderIO",
    "RecordingError",
    "caller_channel",
    "recorded_channel",
    "start_audio_recording",
]

CALLER_CHANNEL = 0
"""livekit's recorder puts the caller's input on the first channel, the agent on the second."""
AGENT_CHANNEL = 1
"""The agent's played audio, where it played."""
RECORDING_CHANNELS = 2


class RecordingError(ValueError):
    """A recording the lab cannot use; the message names what is wrong."""


@dataclass(frozen=True)
class AudioRecording:
    """Where a call's audio was recorded, and the wall time of its first sample.

    Attributes:
        path: The Ogg Opus file livekit's recorder wrote.
        started_at: ``time.time()`` (the call's virtual wall time) at its first sample.
    """

    path: Path
    started_at: float


@dataclass(frozen=True)
class CallerRecording:
    """A recording played as the caller's line of a lab call (``caller_line="recorded"``).

    Attributes:
        path: livekit's recording (Ogg Opus, the caller on channel 0).
        offset: The call second of the recording's first sample (its
            ``audio_recording_started_at`` less the call's start).
        silenced: Call-second spans played as silence (zeros) instead of the recording.
        silero_ends: The recorded call's turn ends (call seconds) that livekit's Silero hearing
            the recording follows where it ends a turn one or two windows off (Opus blurs a
            window at its threshold: see :mod:`.silero_edges`); empty: none.
    """

    path: Path
    offset: float = 0.0
    silenced: tuple[tuple[float, float], ...] = ()
    silero_ends: tuple[float, ...] = ()

    def samples(self) -> np.ndarray:
        """The caller's channel at 16 kHz with sample 0 at the call's second 0."""
        samples, _ = caller_channel(self.path)
        shift = round(self.offset * SAMPLE_RATE)
        if shift >= 0:
            placed = np.concatenate([np.zeros(shift, np.int16), samples])
        else:
            placed = samples[-shift:]
        if self.silenced:
            placed = placed.copy()
            for start, end in self.silenced:
                placed[round(start * SAMPLE_RATE) : round(end * SAMPLE_RATE)] = 0
        return placed


async def start_audio_recording(
    session: Any, path: Path, call_start: float = 0.0, *, unmarked: bool = False
) -> RecorderIO:
    """Wrap ``session``'s audio in livekit's recorder and start it, writing to ``path``.

    Call before ``session.start``, as livekit does inside it; close the returned recorder with
    ``aclose()`` once the session closed (livekit closes it in ``AgentSession.aclose``).

    Args:
        session: The lab's session, its audio input and output set.
        path: Where the recording goes.
        call_start: The loop time of the call's second 0, from which the lab's speaker stamps
            the agent's audio (where livekit's recorder reads a wall-clock time).
        unmarked: Record the caller's voice without the lab's markers, as the call's VAD hears
            it (livekit's Silero: :mod:`.silero`); the session still gets the marked frames.
            A production recording has the voice alone.
    """
    recorder = RecorderIO(agent_session=session)
    # a conversion, not a clock read: a read would nudge the call's later stamps
    place_played_audio(recorder, lambda played_at: virtual_wall_time(call_start + played_at))
    if unmarked:
        voice = _VoiceTap(session.input.audio)
        session.input.audio = _Remarked(recorder.record_input(voice), voice)
    else:
        session.input.audio = recorder.record_input(session.input.audio)
    session.output.audio = recorder.record_output(session.output.audio)
    await recorder.start(output_path=path)
    return recorder


class _VoiceTap(AudioInput):
    """The caller's line without markers (what the recorder records), keeping each marked frame."""

    def __init__(self, line: AudioInput) -> None:
        super().__init__(label="VoiceTap", source=line)
        self.marked: rtc.AudioFrame | None = None

    @override
    async def __anext__(self) -> rtc.AudioFrame:
        assert self.source is not None
        frame = await self.source.__anext__()
        self.marked = frame
        return unmarked_frame(frame)


class _Remarked(AudioInput):
    """The recorder's input handing the session the marked frame it recorded unmarked."""

    def __init__(self, recorded: AudioInput, tap: _VoiceTap) -> None:
        super().__init__(label="Remarked", source=recorded)
        self._tap = tap

    @override
    async def __anext__(self) -> rtc.AudioFrame:
        assert self.source is not None
        await self.source.__anext__()
        # one frame in, one out: the tap's last frame is this one
        assert self._tap.marked is not None
        return self._tap.marked


def caller_channel(path: Path) -> tuple[np.ndarray, float]:
    """The caller's channel of a livekit recording at the lab's rate, and its length in seconds.

    Returns:
        int16 mono samples at 16 kHz from the recording's first sample, and the recording's
        duration in seconds.

    Raises:
        RecordingError: The file is missing, not audio, or not two channels.
    """
    return recorded_channel(path, CALLER_CHANNEL)


def recorded_channel(path: Path, channel: int) -> tuple[np.ndarray, float]:
    """One channel of a livekit recording at the lab's rate, and its length in seconds.

    Returns:
        int16 mono samples at 16 kHz from the recording's first sample, and the recording's
        duration in seconds.

    Raises:
        RecordingError: The file is missing, not audio, or not two channels.
    """
    import av

    try:
        container = av.open(str(path))
    except FileNotFoundError:
        raise RecordingError(f"{path}: no such file") from None
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise RecordingError(f"{path}: not an audio file ({exc})") from None
    with container:
        if not container.streams.audio:
            raise RecordingError(f"{path}: not an audio file (no audio stream)")
        stream = container.streams.audio[0]
        channels = stream.codec_context.channels
        if channels != RECORDING_CHANNELS:
            raise RecordingError(
                f"{path}: channels: {channels}, expected {RECORDING_CHANNELS} (livekit's recorder "
                "writes the caller on channel 0 and the agent on channel 1)"
            )
        # the channel alone, as its own mono stream, at the lab's rate
        resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
        chunks: list[np.ndarray] = []
        seconds = 0.0
        try:
            for frame in container.decode(stream):
                planes = _planar(frame)
                seconds += frame.samples / frame.sample_rate
                mono = av.AudioFrame.from_ndarray(
                    np.ascontiguousarray(planes[channel : channel + 1]),
                    format="fltp",
                    layout="mono",
                )
                mono.sample_rate = frame.sample_rate
                chunks.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(mono))
            chunks.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(None))
        except av.FFmpegError as exc:
            raise RecordingError(f"{path}: not an audio file ({exc})") from None
    samples = np.concatenate(chunks).astype(np.int16) if chunks else np.zeros(0, np.int16)
    return samples, seconds


def _planar(frame: Any) -> np.ndarray:
    """A decoded frame's samples as float32, one row per channel."""
    data = frame.to_ndarray()
    layout_channels = len(frame.layout.channels)
    planes = data if frame.format.is_planar else data.reshape(-1, layout_channels).T
    if planes.dtype.kind == "i":
        planes = planes.astype(np.float32) / float(np.iinfo(planes.dtype).max + 1)
    result: np.ndarray = planes.astype(np.float32)
    return result
