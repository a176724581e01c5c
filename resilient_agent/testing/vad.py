"""A deterministic VAD that hears the audio it is given, with scripted fault modes.

Speech is any 10 ms frame with energy; the VAD applies minimum speech and silence durations like
Silero's. Faults reproduce what production VAD models do wrong, pinned to one user utterance:

* ``no_end_of_speech``: the END_OF_SPEECH after that utterance is swallowed;
* ``stuck``: from that utterance on, the model reports speech forever;
* ``dead``: ``after`` seconds into that utterance the stream stops producing events (it does not
  end, so livekit's end-of-stream recovery never runs).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from livekit import rtc
from livekit.agents import vad
from typing_extensions import override

from .audio import KIND_USER, SAMPLE_RATE, markers_in_bytes
from .schedule import delivery_wait

__all__ = ["ScriptedVAD", "VADFault", "VADFaultMode"]

VADFaultMode = Literal["healthy", "no_end_of_speech", "stuck", "dead"]
SILENCE_TO_END_SPEECH = 0.55
"""Seconds of silence before END_OF_SPEECH, as livekit's Silero plugin defaults to."""
PREFIX_PADDING = 0.5
"""Seconds of audio before START_OF_SPEECH kept with the speech, as livekit's VAD defaults to."""
_ENERGY_THRESHOLD = 100.0
_INFERENCE_EVERY_FRAMES = 3


@dataclass(frozen=True)
class VADFault:
    """A VAD failure pinned to one user utterance.

    Attributes:
        mode: What goes wrong.
        utterance: The index of the utterance it happens in.
        after: For ``dead``: seconds of that utterance the VAD still hears before it dies.
    """

    mode: VADFaultMode = "healthy"
    utterance: int = 0
    after: float = 0.3


class ScriptedVAD(vad.VAD):
    """Energy VAD with Silero-like timing and optional :class:`VADFault` injection.

    Args:
        min_speech_duration: Seconds of energy before START_OF_SPEECH.
        min_silence_duration: Seconds of silence before END_OF_SPEECH.
        fault: How it misbehaves.
        script: What the caller says at a loop time; when given, the VAD hears it instead of
            the frames' samples, as livekit's own test fakes do (for quiet and zeros lines).
        energy_threshold: The mean ``|int16|`` of a frame over which it is speech.
    """

    def __init__(
        self,
        *,
        min_speech_duration: float = 0.05,
        min_silence_duration: float = SILENCE_TO_END_SPEECH,
        fault: VADFault | None = None,
        script: Callable[[float], np.ndarray] | None = None,
        energy_threshold: float = _ENERGY_THRESHOLD,
    ) -> None:
        super().__init__(capabilities=vad.VADCapabilities(update_interval=0.03))
        self.script = script
        self.energy_threshold = energy_threshold
        self.min_speech_duration = min_speech_duration
        self.min_silence_duration = min_silence_duration
        self.fault = fault or VADFault()
        self.streams: list[ScriptedVADStream] = []

    @property
    @override
    def model(self) -> str:
        return "scripted-energy"

    @property
    @override
    def provider(self) -> str:
        return "resilient_agent.testing"

    @override
    def stream(self) -> ScriptedVADStream:
        stream = ScriptedVADStream(self)
        self.streams.append(stream)
        return stream


class ScriptedVADStream(vad.VADStream):
    """One VAD stream; see :class:`ScriptedVAD`."""

    def __init__(self, owner: ScriptedVAD) -> None:
        self._owner = owner
        self.dead = False
        self.stuck = False
        super().__init__(owner)

    async def _main_task(self) -> None:
        owner = self._owner
        fault = owner.fault
        speaking = False
        speech_run = 0.0
        silence_run = 0.0
        speech_total = 0.0
        samples_index = 0
        frame_count = 0
        swallow_next_end = False
        fault_frames = 0
        # the audio of the speech so far, with its prefix padding: livekit's VAD hands it over
        # with START_OF_SPEECH and END_OF_SPEECH (a StreamAdapter recognizes it)
        padding: deque[rtc.AudioFrame] = deque()
        speech: list[rtc.AudioFrame] = []
        async for item in self._input_ch:
            wait = delivery_wait("vad", 0.0)
            if wait > 0:
                await asyncio.sleep(wait)
            if not isinstance(item, rtc.AudioFrame):
                # a flush is a hard segment boundary: forget the running speech state silently
                speaking, speech_run, silence_run, speech_total = False, 0.0, 0.0, 0.0
                continue
            frame = item if owner.script is None else _script_frame(owner.script, item)
            samples_index += frame.samples_per_channel
            frame_count += 1
            if self.dead:
                continue
            raw = frame.data.tobytes()
            voiced = _has_energy(raw, owner.energy_threshold)
            markers = [m for m in markers_in_bytes(raw) if m.kind == KIND_USER]
            if markers and fault.mode != "healthy" and markers[0].source_id == fault.utterance:
                if fault.mode == "stuck":
                    self.stuck = True
                elif fault.mode == "no_end_of_speech":
                    swallow_next_end = True
                elif fault.mode == "dead":
                    fault_frames += 1
                    if fault_frames * frame.duration > fault.after:
                        self.dead = True
                        continue
            if self.stuck:
                voiced = True
            if speaking:
                speech.append(item)
            else:
                padding.append(item)
                while len(padding) * item.duration > PREFIX_PADDING + 1e-9:
                    padding.popleft()

            if voiced:
                speech_run += frame.duration
                silence_run = 0.0
                if speaking:
                    speech_total += frame.duration
            else:
                silence_run += frame.duration
                speech_run = 0.0 if not speaking else speech_run

            if not speaking and voiced and speech_run >= owner.min_speech_duration:
                speaking = True
                speech_total = speech_run
                speech = list(padding)
                padding.clear()
                self._send(
                    vad.VADEventType.START_OF_SPEECH,
                    samples_index,
                    speech_total,
                    0.0,
                    True,
                    frames=speech,
                )
            elif speaking and not voiced and silence_run >= owner.min_silence_duration:
                speaking = False
                if swallow_next_end:
                    swallow_next_end = False
                else:
                    self._send(
                        vad.VADEventType.END_OF_SPEECH,
                        samples_index,
                        speech_total,
                        silence_run,
                        False,
                        frames=speech,
                    )
                speech_total = 0.0
                padding.extend(speech[-round(PREFIX_PADDING / item.duration) :])
                speech = []

            if frame_count % _INFERENCE_EVERY_FRAMES == 0:
                self._send(
                    vad.VADEventType.INFERENCE_DONE,
                    samples_index,
                    speech_total if speaking else 0.0,
                    0.0 if voiced else silence_run,
                    speaking,
                    probability=1.0 if voiced else 0.0,
                )

    def _send(
        self,
        event_type: vad.VADEventType,
        samples_index: int,
        speech_duration: float,
        silence_duration: float,
        speaking: bool,
        *,
        probability: float = 1.0,
        frames: list[rtc.AudioFrame] | None = None,
    ) -> None:
        self._event_ch.send_nowait(
            vad.VADEvent(
                type=event_type,
                samples_index=samples_index,
                timestamp=asyncio.get_running_loop().time(),
                speech_duration=speech_duration,
                silence_duration=silence_duration,
                probability=probability,
                speaking=speaking,
                raw_accumulated_speech=speech_duration,
                raw_accumulated_silence=silence_duration,
                frames=[rtc.combine_audio_frames(frames)] if frames else [],
            )
        )


def _script_frame(
    script: Callable[[float], np.ndarray], received: rtc.AudioFrame
) -> rtc.AudioFrame:
    """What the caller says at the moment ``received`` reached the fake, as a frame."""
    samples = script(asyncio.get_running_loop().time())
    return rtc.AudioFrame(
        data=samples.tobytes(),
        sample_rate=SAMPLE_RATE,
        num_channels=1,
        samples_per_channel=len(samples),
    )


def _has_energy(raw: bytes, threshold: float) -> bool:
    """Whether the int16 samples in ``raw`` are louder, on average, than ``threshold``."""
    if not raw.strip(b"\0"):
        return False  # silence, most of a call: no arithmetic needed
    data = np.frombuffer(raw, dtype=np.int16)
    # the exact mean of the magnitudes: an integer sum, divided once
    return int(np.abs(data.astype(np.int32)).sum()) / data.size > threshold
