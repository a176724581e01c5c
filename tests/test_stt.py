from __future__ import annotations

import asyncio
from collections.abc import Collection

import numpy as np
import pytest
from livekit import rtc
from livekit.agents import stt

from resilient_agent.testing.audio import (
    FRAME_SAMPLES,
    KIND_AGENT,
    AudioMarker,
    ScriptedAudioInput,
    SpeechWindow,
    marker_frame_samples,
)
from resilient_agent.testing.clock import run_virtual
from resilient_agent.testing.stt import HeardWord, ScriptedSTT

TOL = 0.02
INTERIM = stt.SpeechEventType.INTERIM_TRANSCRIPT
FINAL = stt.SpeechEventType.FINAL_TRANSCRIPT

WORDS = ("hello", "big", "world", "foo", "bar")
# 0.5 s to 1.0 s: 50 frames (indexes 50..99), 10 per word, received at (n + 1) * 0.01
WINDOW = SpeechWindow(index=0, start=0.5, end=1.0, words=WORDS)

Event = tuple[stt.SpeechEventType, float, str]


def _lookup(windows: list[SpeechWindow]) -> ScriptedSTT:
    words = {(w.index, j): word for w in windows for j, word in enumerate(w.words)}
    return ScriptedSTT(lambda u, j: words[(u, j)])


def run_stt(
    windows: list[SpeechWindow],
    duration: float,
    *,
    zeroed: Collection[int] = (),
    flush_after: Collection[int] = (),
    stop_after: int | None = None,
    endpoint_silence: float | None = None,
    frame_s: float = 0.01,
) -> tuple[list[Event], ScriptedSTT]:
    """Feed scripted mic frames to a ScriptedSTT stream.

    ``zeroed`` frame indexes are replaced by silence, ``flush_after`` flushes after those frame
    indexes, ``stop_after`` ends the input after that frame index.
    """
    engine = _lookup(windows)
    if endpoint_silence is not None:
        engine.endpoint_silence = endpoint_silence

    async def main() -> list[Event]:
        loop = asyncio.get_running_loop()
        stream = engine.stream()
        events: list[Event] = []

        async def consume() -> None:
            async for ev in stream:
                events.append((ev.type, loop.time(), ev.alternatives[0].text))

        consumer = asyncio.create_task(consume())
        n = 0
        async for frame in ScriptedAudioInput(windows, duration=duration, frame_s=frame_s):
            if n in zeroed:
                frame = rtc.AudioFrame(
                    data=np.zeros(FRAME_SAMPLES, dtype=np.int16).tobytes(),
                    sample_rate=frame.sample_rate,
                    num_channels=1,
                    samples_per_channel=FRAME_SAMPLES,
                )
            stream.push_frame(frame)
            if n in flush_after:
                stream.flush()
            if n == stop_after:
                break
            n += 1
        stream.end_input()
        await consumer
        await stream.aclose()
        return events

    return run_virtual(main()), engine


def finals(events: list[Event]) -> list[tuple[float, str]]:
    return [(t, text) for kind, t, text in events if kind == FINAL]


def interims(events: list[Event]) -> list[tuple[float, str]]:
    return [(t, text) for kind, t, text in events if kind == INTERIM]


def _assert_events(got: list[tuple[float, str]], expected: list[tuple[float, str]]) -> None:
    assert [text for _, text in got] == [text for _, text in expected]
    assert [t for t, _ in got] == pytest.approx([t for t, _ in expected], abs=TOL)


def test_words_are_heard_as_their_frames_arrive() -> None:
    events, engine = run_stt([WINDOW], duration=2.0)
    # a word is recognised at half its frames: frame 50 + 10k + 4, received at 0.55 + 0.1k
    _assert_events(
        interims(events),
        [
            (0.55, "hello"),
            (0.65, "hello big"),
            (0.75, "hello big world"),
            (0.85, "hello big world foo"),
            (0.95, "hello big world foo bar"),
        ],
    )
    # final after 0.2 s of frames without speech (speech ends at 1.0)
    _assert_events(finals(events), [(1.20, "hello big world foo bar")])
    assert len(engine.finals) == 1
    at, text, heard = engine.finals[0]
    assert at == pytest.approx(1.20, abs=TOL)
    assert text == "hello big world foo bar"
    assert heard == tuple(HeardWord(0, i, w) for i, w in enumerate(WORDS))
    assert engine.frames_received == 200
    assert engine.frames_with_speech == 50


def test_frames_of_fifty_ms_carry_the_same_words() -> None:
    events, engine = run_stt([WINDOW], duration=2.0, frame_s=0.05)
    # each 50 ms frame carries five 10 ms markers: a word is heard with the frame holding its
    # fifth (half its ten), the frame that ends 0.55 + 0.1k
    _assert_events(
        interims(events),
        [
            (0.55, "hello"),
            (0.65, "hello big"),
            (0.75, "hello big world"),
            (0.85, "hello big world foo"),
            (0.95, "hello big world foo bar"),
        ],
    )
    assert [text for _, text in finals(events)] == ["hello big world foo bar"]
    assert engine.frames_received == 40


def test_no_frames_no_words() -> None:
    events, engine = run_stt([WINDOW], duration=0.5)
    assert events == []
    assert engine.finals == []
    assert engine.frames_received == 50
    assert engine.frames_with_speech == 0


def test_words_not_yet_received_are_not_heard() -> None:
    # input ends at frame 74: "world" has 5 of its 10 frames (enough), "foo" none
    events, engine = run_stt([WINDOW], duration=2.0, stop_after=74)
    assert [text for _, text in finals(events)] == ["hello big world"]
    assert [w.text for w in engine.finals[0][2]] == ["hello", "big", "world"]

    # input ends at frame 73: "world" has 4 of 10 frames, not enough
    events, _ = run_stt([WINDOW], duration=2.0, stop_after=73)
    assert [text for _, text in finals(events)] == ["hello big"]


def test_word_whose_frames_are_replaced_by_silence_is_lost() -> None:
    events, engine = run_stt([WINDOW], duration=2.0, zeroed=range(70, 80))
    _assert_events(finals(events), [(1.20, "hello big foo bar")])
    assert [w.index for w in engine.finals[0][2]] == [0, 1, 3, 4]
    assert engine.frames_with_speech == 40


def test_word_needs_half_of_its_frames() -> None:
    # 6 of "world"'s 10 frames silenced: 4 received, lost
    events, _ = run_stt([WINDOW], duration=2.0, zeroed=range(70, 76))
    assert [text for _, text in finals(events)] == ["hello big foo bar"]
    # 5 silenced: 5 received, heard (when its last frame arrives, at 0.80)
    events, _ = run_stt([WINDOW], duration=2.0, zeroed=range(70, 75))
    assert [text for _, text in finals(events)] == ["hello big world foo bar"]
    assert (0.80, "hello big world") in [(round(t, 2), text) for t, text in interims(events)]


def test_gap_of_endpoint_silence_splits_the_transcript() -> None:
    # "big" and "world" silenced: 0.2 s without speech after "hello" ends the first segment
    events, engine = run_stt([WINDOW], duration=2.0, zeroed=range(60, 80))
    _assert_events(finals(events), [(0.80, "hello"), (1.20, "foo bar")])
    assert [[w.text for w in heard] for _, _, heard in engine.finals] == [["hello"], ["foo", "bar"]]

    # a 0.19 s gap does not
    events, _ = run_stt([WINDOW], duration=2.0, zeroed=range(61, 80))
    assert [text for _, text in finals(events)] == ["hello foo bar"]


def test_endpoint_silence_is_configurable() -> None:
    events, _ = run_stt([WINDOW], duration=2.0, endpoint_silence=0.5)
    _assert_events(finals(events), [(1.50, "hello big world foo bar")])


def test_flush_finalizes_at_once() -> None:
    # flushed after frame 79 (received at 0.80): hello big world so far
    events, engine = run_stt([WINDOW], duration=2.0, flush_after=[79])
    _assert_events(finals(events), [(0.80, "hello big world"), (1.20, "foo bar")])
    assert [t for t, _, _ in engine.finals] == pytest.approx([0.80, 1.20], abs=TOL)


def test_flush_in_silence_after_speech_finalizes_before_endpoint() -> None:
    events, _ = run_stt([WINDOW], duration=2.0, flush_after=[104])
    _assert_events(finals(events), [(1.05, "hello big world foo bar")])


def test_end_of_input_finalizes_pending_words() -> None:
    events, _ = run_stt([WINDOW], duration=2.0, stop_after=99)
    _assert_events(finals(events), [(1.00, "hello big world foo bar")])


def test_flush_with_nothing_heard_emits_nothing() -> None:
    events, _ = run_stt([WINDOW], duration=1.0, flush_after=[10, 20, 30])
    assert [text for _, text in finals(events)] == ["hello big world foo bar"]
    assert len(finals(events)) == 1


def test_utterances_closer_than_endpoint_merge_and_farther_split() -> None:
    close = [
        SpeechWindow(index=0, start=0.5, end=0.7, words=("one", "two")),
        SpeechWindow(index=1, start=0.8, end=1.0, words=("three", "four")),
    ]
    events, engine = run_stt(close, duration=2.0)
    _assert_events(finals(events), [(1.20, "one two three four")])
    assert [(w.utterance, w.index) for w in engine.finals[0][2]] == [(0, 0), (0, 1), (1, 0), (1, 1)]

    apart = [
        SpeechWindow(index=0, start=0.5, end=0.7, words=("one", "two")),
        SpeechWindow(index=1, start=1.0, end=1.2, words=("three", "four")),
    ]
    events, _ = run_stt(apart, duration=2.0)
    _assert_events(finals(events), [(0.90, "one two"), (1.40, "three four")])


def test_agent_audio_is_not_transcribed() -> None:
    engine = ScriptedSTT(lambda u, j: f"w{u}-{j}")

    async def main() -> list[stt.SpeechEvent]:
        stream = engine.stream()
        for i in range(50):
            samples = marker_frame_samples(AudioMarker(KIND_AGENT, 1, i, 0, 50))
            stream.push_frame(
                rtc.AudioFrame(
                    data=samples.tobytes(),
                    sample_rate=16000,
                    num_channels=1,
                    samples_per_channel=FRAME_SAMPLES,
                )
            )
        stream.end_input()
        got = [ev async for ev in stream]
        await stream.aclose()
        return got

    assert run_virtual(main()) == []
    assert engine.frames_received == 50
    assert engine.frames_with_speech == 0
    assert engine.finals == []


def test_stt_identity_and_lookup() -> None:
    engine = _lookup([WINDOW])
    assert engine.model == "scripted-marker-stt"
    assert engine.provider == "resilient_agent.testing"
    assert engine.capabilities.streaming is True
    assert engine.capabilities.interim_results is True
    assert engine.word(0, 2) == "world"
