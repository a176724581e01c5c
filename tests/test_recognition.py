"""Word recovery with the STT as the STT allows: recognize() for audio that is all there."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from livekit import rtc
from livekit.agents import stt, vad
from livekit.agents.utils.audio import AudioBuffer
from resilient_agent.middleware.caller_words import CallerWords
from resilient_agent.middleware.recognition import recognition_stream
from resilient_agent.middleware.turn_keeper.withheld_audio import transcribe

from resilient_agent.testing.audio import KIND_USER, AudioMarker, marker_frame_samples, read_markers
from resilient_agent.testing.clock import run_virtual
from resilient_agent.testing.vad import ScriptedVAD


def _frames(words: int = 2, frames_per_word: int = 10) -> list[rtc.AudioFrame]:
    return [
        rtc.AudioFrame(
            marker_frame_samples(AudioMarker(KIND_USER, 0, w, i, frames_per_word)).tobytes(),
            16_000,
            1,
            160,
        )
        for w in range(words)
        for i in range(frames_per_word)
    ]


class _BatchSTT(stt.STT[Any]):
    """An STT that only recognizes whole buffers (as openai.STT() does by default)."""

    def __init__(self, *, streaming: bool = False, offline: bool = True) -> None:
        super().__init__(
            capabilities=stt.STTCapabilities(
                streaming=streaming, interim_results=False, offline_recognize=offline
            )
        )
        self.recognized: list[int] = []
        self.streams = 0

    async def _recognize_impl(self, buffer: AudioBuffer, **_: Any) -> stt.SpeechEvent:
        frames = buffer if isinstance(buffer, list) else [buffer]
        self.recognized.append(len(frames))
        return stt.SpeechEvent(
            type=stt.SpeechEventType.FINAL_TRANSCRIPT,
            alternatives=[stt.SpeechData(language="en", text=" hello there ")],  # type: ignore[arg-type]
        )

    def stream(self, **_: Any) -> stt.RecognizeStream:
        self.streams += 1
        raise NotImplementedError("streaming is not supported by this STT")


def test_withheld_audio_is_recovered_through_recognize_on_a_non_streaming_stt() -> None:
    recognizer = _BatchSTT()
    text = run_virtual(transcribe(recognizer, _frames()))
    assert text == "hello there"
    assert recognizer.recognized == [20]
    assert recognizer.streams == 0


def test_a_streaming_stt_that_recognizes_offline_is_asked_once_not_streamed() -> None:
    recognizer = _BatchSTT(streaming=True)
    assert run_virtual(transcribe(recognizer, _frames())) == "hello there"
    assert recognizer.streams == 0


def test_a_streaming_stt_without_offline_recognition_is_streamed() -> None:
    recognizer = _BatchSTT(streaming=True, offline=False)
    with pytest.raises(NotImplementedError):
        run_virtual(transcribe(recognizer, _frames()))
    assert recognizer.recognized == []
    assert recognizer.streams == 1


def test_a_non_streaming_stt_listens_through_a_stream_adapter_over_the_vad() -> None:
    async def main() -> tuple[type, bool]:
        stream = recognition_stream(_BatchSTT(), ScriptedVAD())
        try:
            return type(stream), True
        finally:
            await stream.aclose()

    kind, _ = run_virtual(main())
    assert kind.__name__ == "StreamAdapterWrapper"
    with pytest.raises(NotImplementedError, match="no VAD"):
        recognition_stream(_BatchSTT(), None)


def test_caller_words_listens_with_a_non_streaming_stt() -> None:
    async def main() -> bool:
        words = CallerWords()
        words.detector = ScriptedVAD()
        words.listen(_BatchSTT())
        listening = words.listening
        await words.aclose()
        return listening

    assert run_virtual(main())


def test_the_scripted_vad_hands_over_the_speech_it_heard_at_end_of_speech() -> None:
    # livekit's VAD attaches the speech (with its prefix padding) to START/END_OF_SPEECH; a
    # StreamAdapter recognizes exactly those frames
    async def main() -> list[vad.VADEvent]:
        detector = ScriptedVAD()
        stream = detector.stream()
        silence = rtc.AudioFrame(np.zeros(160, np.int16).tobytes(), 16_000, 1, 160)
        for frame in [silence] * 30 + _frames() + [silence] * 70:
            stream.push_frame(frame)
        stream.end_input()
        events = [e async for e in stream]
        await asyncio.sleep(0)
        return [e for e in events if e.type != vad.VADEventType.INFERENCE_DONE]

    start, end = run_virtual(main())
    assert end.type == vad.VADEventType.END_OF_SPEECH
    heard = read_markers(np.frombuffer(end.frames[0].data, dtype=np.int16))
    assert {(m.source_id, m.part) for m in heard} == {(0, 0), (0, 1)}
    assert len(heard) == 20
    assert start.frames and end.frames[0].duration > 0.2


def test_caller_words_asks_a_non_streaming_stt_about_the_audio_since_the_last_look() -> None:
    # a non-streaming STT reports nothing while the caller talks on: a look is one recognize()
    # over the audio since the last one (1.5 s at most), whose words are new words
    async def main() -> tuple[list[int], list[bool]]:
        recognizer = _BatchSTT()
        words = CallerWords()
        words.detector = ScriptedVAD()
        words.listen(recognizer)
        seen = [words.can_look]
        for at, frame in enumerate(_frames(words=20)):  # 4 s of audio, 10 ms a frame
            words.on_frame(frame, at * 0.01)
        await words.look()
        seen.append(words.saying_words(asyncio.get_running_loop().time()))
        await words.look()  # nothing said since: no request
        await words.aclose()
        return recognizer.recognized, [*seen, words.can_look]

    recognized, seen = run_virtual(main())
    assert recognized == [150]  # the last 1.5 s
    assert seen == [True, True, False]


def test_caller_words_never_asks_a_streaming_stt() -> None:
    async def main() -> bool:
        words = CallerWords()
        words.listen(_BatchSTT(streaming=True))
        can_look = words.can_look
        await words.aclose()
        return can_look

    assert not run_virtual(main())
