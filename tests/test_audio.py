from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest
from livekit import rtc
from livekit.agents.voice.io import PlaybackFinishedEvent

from resilient_agent.testing import clock
from resilient_agent.testing.audio import (
    FRAME_SAMPLES,
    KIND_AGENT,
    KIND_USER,
    SAMPLE_RATE,
    AudioMarker,
    PlayedSegment,
    PlayoutAudioOutput,
    ScriptedAudioInput,
    SpeechWindow,
    frame_markers,
    marker_frame_samples,
    read_markers,
)
from resilient_agent.testing.clock import run_virtual

TOL = 0.02


def _frame(samples: np.ndarray) -> rtc.AudioFrame:
    return rtc.AudioFrame(
        data=samples.tobytes(),
        sample_rate=SAMPLE_RATE,
        num_channels=1,
        samples_per_channel=len(samples),
    )


def agent_frames(sentence_id: int, seconds: float) -> Iterator[rtc.AudioFrame]:
    """Marked agent audio of one sentence, 10 ms per frame."""
    n = round(seconds / 0.01)
    for i in range(n):
        yield _frame(marker_frame_samples(AudioMarker(KIND_AGENT, sentence_id, i, 0, n)))


# --- markers ----------------------------------------------------------------------------------


def test_marker_round_trip() -> None:
    marker = AudioMarker(KIND_USER, source_id=4, part=2, frame_in_part=1, frames_in_part=9)
    samples = marker_frame_samples(marker)
    assert samples.dtype == np.int16
    assert len(samples) == FRAME_SAMPLES
    assert read_markers(samples) == [marker]
    assert frame_markers(_frame(samples)) == [marker]


def test_marker_frames_have_energy_and_silence_has_no_marker() -> None:
    samples = marker_frame_samples(AudioMarker(KIND_AGENT, 1, 0, 0, 1))
    assert np.abs(samples.astype(np.int32)).mean() > 100
    silence = np.zeros(FRAME_SAMPLES, dtype=np.int16)
    assert read_markers(silence) == []
    assert frame_markers(_frame(silence)) == []


def test_markers_in_a_block_are_read_in_order() -> None:
    markers = [AudioMarker(KIND_AGENT, 9, i, 0, 3) for i in range(3)]
    block = np.concatenate([marker_frame_samples(m) for m in markers])
    assert read_markers(block) == markers
    # re-framed through a header: only markers held whole survive, the cut one is lost
    assert read_markers(block[:163]) == markers[:1]
    assert read_markers(block[163:]) == markers[2:]
    assert read_markers(block[100:]) == markers[1:]


def test_read_markers_skips_truncated_header_and_unknown_kind() -> None:
    samples = marker_frame_samples(AudioMarker(KIND_USER, 1, 2, 3, 4))
    assert read_markers(samples[:4]) == []
    unknown = samples.copy()
    unknown[1] = 7
    assert read_markers(unknown) == []


def test_magic_bytes_across_two_samples_are_no_marker() -> None:
    # the magic number's two bytes (0x5A), one in each sample, then bytes that, read from the
    # odd offset, would make a whole user marker
    marker = AudioMarker(KIND_USER, 3, 1, 0, 4)
    straddle = np.array([0x5A00, 0x015A, 0x0500, 0x0600, 0x0700, 0x0800, 0], dtype=np.int16)
    block = np.concatenate([straddle, marker_frame_samples(marker), straddle])
    assert read_markers(straddle) == []
    assert read_markers(block) == [marker]
    assert frame_markers(_frame(block)) == [marker]


def test_consecutive_magic_samples_each_start_a_header() -> None:
    samples = np.array([23_130, 23_130, KIND_AGENT, 4, 5, 6, 7], dtype=np.int16)
    # the first reads the second magic as its kind (unknown); the second is a whole marker
    assert read_markers(samples) == [AudioMarker(KIND_AGENT, 4, 5, 6, 7)]
    assert read_markers(samples[:6]) == []


def test_marker_on_base_samples_keeps_the_base() -> None:
    base = np.arange(FRAME_SAMPLES, dtype=np.int16)
    marker = AudioMarker(KIND_USER, 2, 0, 0, 5)
    samples = marker_frame_samples(marker, base)
    assert read_markers(samples) == [marker]
    np.testing.assert_array_equal(samples[6:], base[6:])
    np.testing.assert_array_equal(base, np.arange(FRAME_SAMPLES, dtype=np.int16))


# --- ScriptedAudioInput -----------------------------------------------------------------------


def _collect_input(
    windows: list[SpeechWindow], duration: float, frame_s: float = 0.01
) -> tuple[list[tuple[float, rtc.AudioFrame]], ScriptedAudioInput]:
    audio_in = ScriptedAudioInput(windows, duration=duration, frame_s=frame_s)

    async def main() -> list[tuple[float, rtc.AudioFrame]]:
        loop = asyncio.get_running_loop()
        return [(loop.time(), frame) async for frame in audio_in]

    return run_virtual(main()), audio_in


def test_scripted_input_yields_duration_over_ten_ms_frames_on_the_clock() -> None:
    received, audio_in = _collect_input([], duration=2.0)
    assert len(received) == 200
    assert audio_in.frames_sent == 200
    times = [t for t, _ in received]
    # frame n is ready once n+1 frames have elapsed
    assert times == pytest.approx([(n + 1) * 0.01 for n in range(200)], abs=1e-6)
    for _, frame in received:
        assert frame.sample_rate == SAMPLE_RATE
        assert frame.num_channels == 1
        assert frame.samples_per_channel == FRAME_SAMPLES
        assert frame_markers(frame) == []
        assert not np.frombuffer(frame.data, dtype=np.int16).any()


def test_longer_frames_carry_the_same_samples_five_lab_frames_at_a_time() -> None:
    windows = [SpeechWindow(index=3, start=0.5, end=1.0, words=("alpha", "beta"))]
    lab, _ = _collect_input(windows, duration=2.0)
    roomio, audio_in = _collect_input(windows, duration=2.0, frame_s=0.05)
    assert audio_in.frames_sent == len(roomio) == 40
    # frame n is ready once its last 10 ms has elapsed
    assert [t for t, _ in roomio] == pytest.approx([(n + 1) * 0.05 for n in range(40)], abs=1e-6)
    assert all(frame.samples_per_channel == 5 * FRAME_SAMPLES for _, frame in roomio)
    joined = b"".join(bytes(frame.data) for _, frame in roomio)
    assert joined == b"".join(bytes(frame.data) for _, frame in lab)
    # every 10 ms marker is in its frame, in order
    assert [m for _, f in roomio for m in frame_markers(f)] == [
        m for _, f in lab for m in frame_markers(f)
    ]


def test_a_frame_duration_that_is_no_whole_number_of_lab_frames_is_refused() -> None:
    with pytest.raises(ValueError, match=r"frame_s=0\.015"):
        ScriptedAudioInput([], duration=1.0, frame_s=0.015)


def test_scripted_input_speech_frames_carry_utterance_and_word_indexes() -> None:
    words = ("alpha", "beta", "gamma", "delta", "echo")
    windows = [
        SpeechWindow(index=7, start=1.2, end=1.5, words=("hi", "there")),
        SpeechWindow(index=3, start=0.5, end=1.0, words=words),
    ]
    received, _ = _collect_input(windows, duration=2.0)
    assert len(received) == 200
    markers = [frame_markers(frame) for _, frame in received]

    speech = {n for n, found in enumerate(markers) if found}
    assert speech == set(range(50, 100)) | set(range(120, 150))

    for n in range(50, 100):
        assert markers[n] == [AudioMarker(KIND_USER, 3, (n - 50) // 10, (n - 50) % 10, 10)]
    for n in range(120, 150):
        k = n - 120
        assert markers[n] == [AudioMarker(KIND_USER, 7, k // 15, k % 15, 15)]

    for n in set(range(200)) - speech:
        samples = np.frombuffer(received[n][1].data, dtype=np.int16)
        assert not samples.any(), f"frame {n} should be silence"


def test_scripted_input_words_split_unevenly_cover_the_window() -> None:
    # 10 frames over 3 words: word boundaries at ceil(10/3)=4 and ceil(20/3)=7
    received, _ = _collect_input(
        [SpeechWindow(index=0, start=0.0, end=0.1, words=("a", "b", "c"))], duration=0.2
    )
    parts = [frame_markers(f)[0] for _, f in received[:10]]
    assert [m.part for m in parts] == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [m.frames_in_part for m in parts] == [4, 4, 4, 4, 3, 3, 3, 3, 3, 3]
    assert [m.frame_in_part for m in parts] == [0, 1, 2, 3, 0, 1, 2, 0, 1, 2]
    assert all(frame_markers(f) == [] for _, f in received[10:])


def test_scripted_input_marks_real_speech_samples() -> None:
    speech = (np.arange(5 * FRAME_SAMPLES) % 1000 + 500).astype(np.int16)
    window = SpeechWindow(index=1, start=0.0, end=0.05, words=("word",), samples=speech)
    received, _ = _collect_input([window], duration=0.05)
    assert len(received) == 5
    for n, (_, frame) in enumerate(received):
        data = np.frombuffer(frame.data, dtype=np.int16)
        assert frame_markers(frame) == [AudioMarker(KIND_USER, 1, 0, n, 5)]
        expected = speech[n * FRAME_SAMPLES : (n + 1) * FRAME_SAMPLES]
        np.testing.assert_array_equal(data[6:], expected[6:])


# --- PlayoutAudioOutput -----------------------------------------------------------------------


class _Probe:
    """Records an output's playback events with their loop times."""

    def __init__(self, out: PlayoutAudioOutput) -> None:
        self.loop = asyncio.get_running_loop()
        self.started: list[tuple[float, float]] = []
        self.finished: list[tuple[float, PlaybackFinishedEvent]] = []
        out.on(
            "playback_started", lambda ev: self.started.append((self.loop.time(), ev.created_at))
        )
        out.on("playback_finished", lambda ev: self.finished.append((self.loop.time(), ev)))


async def _capture(out: PlayoutAudioOutput, frames: Iterator[rtc.AudioFrame]) -> None:
    for frame in frames:
        await out.capture_frame(frame)


def test_playout_plays_one_second_then_finishes_once() -> None:
    done: list[PlayedSegment] = []

    async def main() -> tuple[_Probe, PlaybackFinishedEvent, float, list[str], PlayoutAudioOutput]:
        loop = asyncio.get_running_loop()
        out = PlayoutAudioOutput(clock=loop.time, on_segment_done=done.append)
        probe = _Probe(out)
        states = [out.playing]
        await _capture(out, agent_frames(7, 1.0))
        out.flush()
        states.append(out.playing)
        ev = await out.wait_for_playout()
        finished_at = loop.time()
        states.append(out.playing)
        out.clear_buffer()  # nothing left: no second event
        await asyncio.sleep(2.0)
        return probe, ev, finished_at, states, out

    probe, ev, finished_at, states, out = run_virtual(main())
    assert states == ["idle", "playing", "idle"]
    assert finished_at == pytest.approx(1.0, abs=TOL)
    assert ev.interrupted is False
    assert ev.playback_position == pytest.approx(1.0, abs=TOL)
    assert [t for t, _ in probe.started] == pytest.approx([0.0], abs=TOL)
    assert [t for t, _ in probe.finished] == pytest.approx([1.0], abs=TOL)
    assert len(out.segments) == 1
    segment = out.segments[0]
    assert done == [segment]
    assert segment.started_at == pytest.approx(0.0, abs=TOL)
    assert segment.ended_at == pytest.approx(1.0, abs=TOL)
    assert segment.pushed == pytest.approx(1.0, abs=1e-6)
    assert segment.played == pytest.approx(1.0, abs=1e-6)
    assert segment.interrupted is False
    assert list(segment.sentences) == [7]
    assert segment.sentences[7] == pytest.approx((0.0, 1.0, 1.0), abs=1e-6)


def test_playout_default_clock_is_the_virtual_wall_clock() -> None:
    async def main() -> PlayedSegment:
        await asyncio.sleep(3.0)
        out = PlayoutAudioOutput()
        await _capture(out, agent_frames(1, 0.5))
        out.flush()
        await out.wait_for_playout()
        return out.segments[0]

    segment = run_virtual(main())
    assert segment.started_at == pytest.approx(clock._EPOCH + 3.0, abs=TOL)
    assert segment.ended_at == pytest.approx(clock._EPOCH + 3.5, abs=TOL)


def test_clear_buffer_mid_way_interrupts_at_the_play_position() -> None:
    async def main() -> tuple[_Probe, PlayoutAudioOutput]:
        loop = asyncio.get_running_loop()
        out = PlayoutAudioOutput(clock=loop.time)
        probe = _Probe(out)
        await _capture(out, agent_frames(1, 0.5))
        await _capture(out, agent_frames(2, 0.5))
        out.flush()
        await asyncio.sleep(0.7)
        out.clear_buffer()
        out.clear_buffer()
        await asyncio.sleep(2.0)  # the cancelled finish timer must not fire
        return probe, out

    probe, out = run_virtual(main())
    assert len(probe.finished) == 1
    at, ev = probe.finished[0]
    assert at == pytest.approx(0.7, abs=TOL)
    assert ev.interrupted is True
    assert ev.playback_position == pytest.approx(0.7, abs=TOL)
    segment = out.segments[0]
    assert segment.interrupted is True
    assert segment.pushed == pytest.approx(1.0, abs=1e-6)
    assert segment.played == pytest.approx(0.7, abs=TOL)
    assert segment.ended_at == pytest.approx(0.7, abs=TOL)
    assert sorted(segment.sentences) == [1, 2]
    assert segment.sentences[1] == pytest.approx((0.0, 0.5, 0.5), abs=1e-6)
    start2, heard2, len2 = segment.sentences[2]
    assert start2 == pytest.approx(0.5, abs=1e-6)
    assert heard2 == pytest.approx(0.2, abs=0.011)
    assert len2 == pytest.approx(0.5, abs=1e-6)


def test_clear_buffer_before_flush_interrupts() -> None:
    async def main() -> _Probe:
        out = PlayoutAudioOutput(clock=asyncio.get_running_loop().time)
        probe = _Probe(out)
        await _capture(out, agent_frames(1, 1.0))
        await asyncio.sleep(0.25)
        out.clear_buffer()
        return probe

    probe = run_virtual(main())
    assert [(round(t, 2), ev.interrupted) for t, ev in probe.finished] == [(0.25, True)]
    assert probe.finished[0][1].playback_position == pytest.approx(0.25, abs=TOL)


def test_pause_delays_the_finish_by_the_paused_time() -> None:
    async def main() -> tuple[_Probe, list[str], PlayoutAudioOutput]:
        loop = asyncio.get_running_loop()
        out = PlayoutAudioOutput(clock=loop.time)
        probe = _Probe(out)
        await _capture(out, agent_frames(3, 1.0))
        out.flush()
        await asyncio.sleep(0.3)
        out.pause()
        states = [out.playing]
        await asyncio.sleep(0.5)
        states.append(out.playing)
        out.resume()
        states.append(out.playing)
        await out.wait_for_playout()
        states.append(out.playing)
        return probe, states, out

    probe, states, out = run_virtual(main())
    assert states == ["paused", "paused", "playing", "idle"]
    assert len(probe.finished) == 1
    at, ev = probe.finished[0]
    assert at == pytest.approx(1.5, abs=TOL)
    assert ev.interrupted is False
    assert ev.playback_position == pytest.approx(1.0, abs=TOL)
    assert out.segments[0].ended_at == pytest.approx(1.5, abs=TOL)


def test_pauses_split_the_segment_into_the_runs_the_caller_heard() -> None:
    async def main() -> PlayedSegment:
        out = PlayoutAudioOutput(clock=asyncio.get_running_loop().time)
        await _capture(out, agent_frames(3, 1.0))
        out.pause()  # at the first audio, as a middleware holding a speech does
        await asyncio.sleep(2.0)
        out.resume()
        out.flush()
        await asyncio.sleep(0.4)
        out.pause()
        await asyncio.sleep(0.5)
        out.resume()
        await out.wait_for_playout()
        return out.segments[0]

    segment = run_virtual(main())
    # the zero-length run at the first frame is not a run: nothing played before 2.0 s
    flat = [x for r in segment.runs for x in (r.started_at, r.offset, r.duration)]
    assert flat == pytest.approx([2.0, 0.0, 0.4, 2.9, 0.4, 0.6], abs=TOL)
    assert segment.started_at == pytest.approx(0.0, abs=TOL)  # livekit's playback_started
    assert segment.time_at(0.0) == pytest.approx(2.0, abs=TOL)
    assert segment.time_at(0.5) == pytest.approx(3.0, abs=TOL)
    assert segment.time_at(1.5) is None
    assert segment.heard_between(0.0, 2.0) == pytest.approx(0.0, abs=TOL)
    assert segment.heard_between(0.0, 3.0) == pytest.approx(0.5, abs=TOL)


def test_clear_buffer_while_paused_reports_the_position_at_pause() -> None:
    async def main() -> _Probe:
        out = PlayoutAudioOutput(clock=asyncio.get_running_loop().time)
        probe = _Probe(out)
        await _capture(out, agent_frames(3, 1.0))
        out.flush()
        await asyncio.sleep(0.3)
        out.pause()
        await asyncio.sleep(0.4)
        out.clear_buffer()
        return probe

    probe = run_virtual(main())
    assert len(probe.finished) == 1
    at, ev = probe.finished[0]
    assert at == pytest.approx(0.7, abs=TOL)
    assert ev.interrupted is True
    assert ev.playback_position == pytest.approx(0.3, abs=TOL)


def test_audio_captured_while_paused_starts_on_resume() -> None:
    async def main() -> tuple[_Probe, PlayoutAudioOutput]:
        out = PlayoutAudioOutput(clock=asyncio.get_running_loop().time)
        probe = _Probe(out)
        out.pause()
        await _capture(out, agent_frames(4, 1.0))
        out.flush()
        await asyncio.sleep(0.5)
        assert probe.started == []
        assert probe.finished == []
        out.resume()
        await out.wait_for_playout()
        return probe, out

    probe, out = run_virtual(main())
    assert [t for t, _ in probe.started] == pytest.approx([0.5], abs=TOL)
    assert [t for t, _ in probe.finished] == pytest.approx([1.5], abs=TOL)
    assert out.segments[0].started_at == pytest.approx(0.5, abs=TOL)


def test_flush_without_audio_reports_nothing() -> None:
    async def main() -> tuple[_Probe, PlayoutAudioOutput]:
        out = PlayoutAudioOutput(clock=asyncio.get_running_loop().time)
        probe = _Probe(out)
        out.flush()
        out.clear_buffer()
        await asyncio.sleep(1.0)
        return probe, out

    probe, out = run_virtual(main())
    assert probe.started == []
    assert probe.finished == []
    assert out.segments == []


def test_consecutive_segments_finish_once_each() -> None:
    async def main() -> tuple[_Probe, PlayoutAudioOutput]:
        out = PlayoutAudioOutput(clock=asyncio.get_running_loop().time)
        probe = _Probe(out)
        await _capture(out, agent_frames(1, 0.5))
        out.flush()
        await out.wait_for_playout()
        await asyncio.sleep(0.5)
        await _capture(out, agent_frames(2, 0.3))
        out.flush()
        await out.wait_for_playout()
        return probe, out

    probe, out = run_virtual(main())
    assert [t for t, _ in probe.started] == pytest.approx([0.0, 1.0], abs=TOL)
    assert [t for t, _ in probe.finished] == pytest.approx([0.5, 1.3], abs=TOL)
    assert [list(s.sentences) for s in out.segments] == [[1], [2]]


def test_capture_after_flush_waits_for_the_flushed_segment() -> None:
    # regression: a segment captured while the previous one still played was merged into it,
    # so livekit counted two segments, saw one playback_finished and wait_for_playout hung
    async def main() -> tuple[_Probe, PlayoutAudioOutput, PlaybackFinishedEvent]:
        out = PlayoutAudioOutput(clock=asyncio.get_running_loop().time)
        probe = _Probe(out)
        await _capture(out, agent_frames(1, 1.0))
        out.flush()
        await asyncio.sleep(0.5)
        await _capture(out, agent_frames(2, 1.0))
        out.flush()
        ev = await asyncio.wait_for(out.wait_for_playout(), timeout=10.0)
        return probe, out, ev

    probe, out, ev = run_virtual(main())
    assert [t for t, _ in probe.finished] == pytest.approx([1.0, 2.0], abs=TOL)
    assert [e.interrupted for _, e in probe.finished] == [False, False]
    assert ev.playback_position == pytest.approx(1.0, abs=TOL)
    assert [list(s.sentences) for s in out.segments] == [[1], [2]]
    assert [s.started_at for s in out.segments] == pytest.approx([0.0, 1.0], abs=TOL)


def test_can_pause_capability() -> None:
    assert PlayoutAudioOutput().can_pause is True
    assert PlayoutAudioOutput(can_pause=False).can_pause is False
