from __future__ import annotations

import asyncio

import numpy as np
import pytest
from livekit import rtc
from livekit.agents.vad import VADEvent, VADEventType

from resilient_agent.testing.audio import ScriptedAudioInput, SpeechWindow
from resilient_agent.testing.clock import run_virtual
from resilient_agent.testing.vad import ScriptedVAD, ScriptedVADStream, VADFault

TOL = 0.02
START = VADEventType.START_OF_SPEECH
END = VADEventType.END_OF_SPEECH
INFERENCE = VADEventType.INFERENCE_DONE

Event = tuple[VADEventType, float, VADEvent]


def _window(index: int, start: float, end: float) -> SpeechWindow:
    return SpeechWindow(index=index, start=start, end=end, words=("w1", "w2", "w3"))


def run_vad(
    windows: list[SpeechWindow],
    duration: float,
    *,
    fault: VADFault | None = None,
    flush_at: float | None = None,
) -> tuple[list[Event], ScriptedVAD, ScriptedVADStream]:
    """Feed scripted mic audio into a ScriptedVAD stream; events with their loop times."""

    async def main() -> tuple[list[Event], ScriptedVAD, ScriptedVADStream]:
        loop = asyncio.get_running_loop()
        vad = ScriptedVAD(fault=fault)
        stream = vad.stream()
        events: list[Event] = []

        async def consume() -> None:
            async for ev in stream:
                events.append((ev.type, loop.time(), ev))

        consumer = asyncio.create_task(consume())
        flushed = False
        async for frame in ScriptedAudioInput(windows, duration=duration):
            stream.push_frame(frame)
            if flush_at is not None and not flushed and loop.time() >= flush_at - 1e-9:
                stream.flush()
                flushed = True
        stream.end_input()
        await consumer
        await stream.aclose()
        return events, vad, stream

    return run_virtual(main())


def speech_events(events: list[Event]) -> list[tuple[VADEventType, float]]:
    return [(kind, t) for kind, t, _ in events if kind in (START, END)]


def _assert_timeline(
    got: list[tuple[VADEventType, float]], expected: list[tuple[VADEventType, float]]
) -> None:
    assert [kind for kind, _ in got] == [kind for kind, _ in expected]
    assert [t for _, t in got] == pytest.approx([t for _, t in expected], abs=TOL)


def test_healthy_start_and_end_of_speech_timing() -> None:
    events, vad, stream = run_vad([_window(0, 0.5, 1.5)], duration=3.0)
    assert vad.streams == [stream]
    # START after min_speech_duration (0.05 s) of speech; END after 0.55 s of silence
    _assert_timeline(speech_events(events), [(START, 0.55), (END, 2.05)])

    start_ev = next(ev for kind, _, ev in events if kind == START)
    end_ev = next(ev for kind, _, ev in events if kind == END)
    assert start_ev.speaking is True
    assert end_ev.speaking is False
    assert start_ev.timestamp == pytest.approx(0.55, abs=TOL)
    assert end_ev.timestamp == pytest.approx(2.05, abs=TOL)
    assert end_ev.speech_duration == pytest.approx(1.0, abs=TOL)
    assert end_ev.silence_duration == pytest.approx(0.55, abs=TOL)
    # samples_index counts 16 kHz samples pushed so far
    assert end_ev.samples_index == round(end_ev.timestamp / 0.01) * 160


def test_inference_events_every_three_frames_report_speaking_state() -> None:
    events, _, _ = run_vad([_window(0, 0.5, 1.5)], duration=3.0)
    inference = [(t, ev) for kind, t, ev in events if kind == INFERENCE]
    assert len(inference) == 100  # 300 frames
    assert [t for t, _ in inference] == pytest.approx(
        [0.03 * (i + 1) for i in range(100)], abs=1e-6
    )
    by_time = {round(t, 2): ev for t, ev in inference}
    assert by_time[0.3].speaking is False and by_time[0.3].probability == 0.0
    assert by_time[0.99].speaking is True and by_time[0.99].probability == 1.0
    assert by_time[0.99].speech_duration == pytest.approx(0.49, abs=TOL)
    # in the trailing silence, before END, the VAD still says speaking
    assert by_time[1.8].speaking is True and by_time[1.8].probability == 0.0
    assert by_time[2.1].speaking is False


def test_two_utterances_give_two_speech_segments() -> None:
    events, _, _ = run_vad([_window(0, 0.5, 1.0), _window(1, 2.0, 2.4)], duration=3.5)
    _assert_timeline(
        speech_events(events), [(START, 0.55), (END, 1.55), (START, 2.05), (END, 2.95)]
    )


def test_short_blip_is_not_speech() -> None:
    events, _, _ = run_vad([_window(0, 0.5, 0.53)], duration=1.5)
    assert speech_events(events) == []
    assert all(not ev.speaking for _, _, ev in events)


def test_pause_shorter_than_min_silence_does_not_end_speech() -> None:
    events, _, _ = run_vad([_window(0, 0.5, 1.0), _window(1, 1.4, 1.8)], duration=3.0)
    _assert_timeline(speech_events(events), [(START, 0.55), (END, 2.35)])


def test_silence_only_gives_no_speech_events() -> None:
    events, _, _ = run_vad([], duration=1.0)
    assert speech_events(events) == []
    assert len(events) == 33


def test_flush_forgets_speech_without_an_end_event() -> None:
    events, _, _ = run_vad([_window(0, 0.5, 1.5)], duration=3.0, flush_at=1.0)
    # speech continues after the flush, so a new segment starts 0.05 s later and ends normally
    _assert_timeline(speech_events(events), [(START, 0.55), (START, 1.05), (END, 2.05)])

    events, _, _ = run_vad([_window(0, 0.5, 1.5)], duration=3.0, flush_at=1.6)
    # flushed in the trailing silence: the END is never sent
    _assert_timeline(speech_events(events), [(START, 0.55)])


def test_fault_no_end_of_speech_swallows_only_that_utterances_end() -> None:
    windows = [_window(0, 0.5, 1.0), _window(1, 2.0, 2.5)]
    events, _, stream = run_vad(
        windows, duration=4.0, fault=VADFault(mode="no_end_of_speech", utterance=0)
    )
    _assert_timeline(speech_events(events), [(START, 0.55), (START, 2.05), (END, 3.05)])
    assert stream.dead is False
    assert stream.stuck is False

    events, _, _ = run_vad(
        windows, duration=4.0, fault=VADFault(mode="no_end_of_speech", utterance=1)
    )
    _assert_timeline(speech_events(events), [(START, 0.55), (END, 1.55), (START, 2.05)])


def test_fault_stuck_never_ends_speech() -> None:
    windows = [_window(0, 0.5, 1.0), _window(1, 2.0, 2.5)]
    events, _, stream = run_vad(windows, duration=6.0, fault=VADFault(mode="stuck", utterance=1))
    _assert_timeline(speech_events(events), [(START, 0.55), (END, 1.55), (START, 2.05)])
    assert stream.stuck is True
    late = [ev for kind, t, ev in events if kind == INFERENCE and t > 2.1]
    assert len(late) > 100
    assert all(ev.speaking and ev.probability == 1.0 for ev in late)
    assert late[-1].speech_duration == pytest.approx(6.0 - 2.0, abs=0.05)


def test_fault_dead_stops_all_events_into_the_utterance() -> None:
    windows = [_window(0, 0.5, 1.0), _window(1, 2.0, 2.5)]
    events, _, stream = run_vad(
        windows, duration=4.0, fault=VADFault(mode="dead", utterance=1, after=0.3)
    )
    assert stream.dead is True
    _assert_timeline(speech_events(events), [(START, 0.55), (END, 1.55), (START, 2.05)])
    # alive for the first 0.3 s of the faulted utterance (inference every 30 ms), then silent
    # although frames keep coming until 4.0
    assert max(t for _, t, _ in events) == pytest.approx(2.28, abs=TOL)
    assert not [t for _, t, _ in events if t > 2.3]


def test_fault_dead_on_first_utterance_only_gets_start() -> None:
    events, _, stream = run_vad(
        [_window(0, 0.5, 1.5)], duration=3.0, fault=VADFault(mode="dead", utterance=0)
    )
    assert stream.dead is True
    _assert_timeline(speech_events(events), [(START, 0.55)])
    assert max(t for _, t, _ in events) == pytest.approx(0.78, abs=TOL)


def test_fault_on_another_utterance_index_is_inert() -> None:
    healthy, _, _ = run_vad([_window(0, 0.5, 1.0)], duration=2.0)
    for mode in ("no_end_of_speech", "stuck", "dead"):
        faulted, _, stream = run_vad(
            [_window(0, 0.5, 1.0)], duration=2.0, fault=VADFault(mode=mode, utterance=5)
        )
        assert speech_events(faulted) == speech_events(healthy), mode
        assert not stream.dead and not stream.stuck


def test_energy_threshold_ignores_low_noise() -> None:
    async def main() -> list[VADEventType]:
        vad = ScriptedVAD()
        stream = vad.stream()
        rng = np.random.default_rng(0)
        for _ in range(50):
            noise = rng.integers(-50, 50, 160).astype(np.int16)
            stream.push_frame(
                rtc.AudioFrame(
                    data=noise.tobytes(), sample_rate=16000, num_channels=1, samples_per_channel=160
                )
            )
        stream.end_input()
        kinds = [ev.type async for ev in stream]
        await stream.aclose()
        return kinds

    kinds = run_virtual(main())
    assert kinds == [INFERENCE] * 16


def _constant_frames_events(level: int) -> list[VADEventType]:
    """The events of one second of frames whose samples are ``level`` and ``-level`` in turn."""

    async def main() -> list[VADEventType]:
        stream = ScriptedVAD().stream()
        samples = np.tile(np.array([level, -level], dtype=np.int16), 80)
        for _ in range(100):
            stream.push_frame(
                rtc.AudioFrame(
                    data=samples.tobytes(),
                    sample_rate=16000,
                    num_channels=1,
                    samples_per_channel=160,
                )
            )
        stream.end_input()
        kinds = [ev.type async for ev in stream]
        await stream.aclose()
        return kinds

    return run_virtual(main())


def test_energy_is_the_mean_magnitude_above_the_threshold() -> None:
    # a mean magnitude of exactly 100 is not speech; one more is, whatever the sign
    assert VADEventType.START_OF_SPEECH not in _constant_frames_events(100)
    assert VADEventType.START_OF_SPEECH in _constant_frames_events(101)


def test_vad_identity() -> None:
    async def main() -> tuple[str, str, float]:
        vad = ScriptedVAD()
        return vad.model, vad.provider, vad.capabilities.update_interval

    assert run_virtual(main()) == ("scripted-energy", "resilient_agent.testing", 0.03)
