"""The replay hears the call's audio recording: livekit's record=True file, the caller's channel."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from livekit.agents import Agent

from resilient_agent._livekit.versions import installed_livekit_version
from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.cli import main
from resilient_agent.lab.replay.plan import load_plan
from resilient_agent.lab.replay.recording import read_recording
from resilient_agent.lab.replay.round_trip import round_trip
from resilient_agent.lab.run import RESILIENT_PATH, load_agent_class
from resilient_agent.testing import run_scenario
from resilient_agent.testing.audio_recording import caller_channel
from resilient_agent.testing.session_report import session_report

SEED = "tool_gap/gap_disallow_and_say"
STEM = "tool_gap__gap_disallow_and_say"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The seed call recorded by the lab on plain Agent: its report and livekit's audio file."""
    folder = tmp_path_factory.mktemp("recorded")
    args = ["lab", "--quiet", "--agent", "livekit.agents:Agent", "--only", f"{SEED}$"]
    main([*args, "--record", str(folder)])
    return folder / "Agent" / f"{STEM}.json", folder / "Agent" / f"{STEM}.ogg"


def _speech_runs(samples: np.ndarray) -> list[tuple[float, float]]:
    """The recording's stretches of speech, in seconds (10 ms frames louder than its ringing)."""
    frames = samples[: len(samples) // 160 * 160].reshape(-1, 160).astype(np.int32)
    loud = np.abs(frames).mean(axis=1) > 250
    edges = np.flatnonzero(np.diff(np.concatenate([[0], loud.astype(int), [0]])))
    return [(start / 100, end / 100) for start, end in zip(edges[::2], edges[1::2], strict=True)]


def test_the_lab_records_livekits_audio_file_beside_the_report(recorded: tuple[Path, Path]) -> None:
    report_path, audio_path = recorded
    report = json.loads(report_path.read_text())
    assert report["audio_recording_path"] == str(audio_path.absolute())
    # the recorder's first sample is the call's start: the first event's time, within a frame
    assert abs(report["audio_recording_started_at"] - report["events"][0]["created_at"]) < 0.01
    with av.open(str(audio_path)) as container:
        stream = container.streams.audio[0]
        assert (stream.codec_context.name, stream.codec_context.channels) == ("opus", 2)
        assert stream.codec_context.sample_rate == 48_000
    samples, seconds = caller_channel(audio_path)
    scenario = next(s for s in CATALOG if s.name == SEED)
    # the call to its close
    closed = report["events"][-1]["created_at"] - report["audio_recording_started_at"]
    assert seconds == pytest.approx(closed, abs=0.05)
    # channel 0 is the caller: speech exactly where the caller spoke
    assert _speech_runs(samples) == [(u.start, u.end) for u in scenario.utterances]


# docs/replay.md's command, run as written
REPLAY_WITH_RECORDING = "resilient-agent replay reports/Agent/tool_gap__gap_disallow_and_say.json --recording reports/Agent/tool_gap__gap_disallow_and_say.ogg"  # noqa: E501


def _copy_reports(recorded: tuple[Path, Path], root: Path) -> Path:
    """The recorded call under ``root/reports/Agent``, as if the lab had recorded it there."""
    folder = root / "reports" / "Agent"
    folder.mkdir(parents=True)
    report_path, audio_path = recorded
    shutil.copy(audio_path, folder / audio_path.name)
    report = json.loads(report_path.read_text())
    report["audio_recording_path"] = str((folder / audio_path.name).absolute())
    (folder / report_path.name).write_text(json.dumps(report))
    return folder / report_path.name


def test_the_replay_plays_the_recording_and_transcribes_only_what_reached_the_stt(
    recorded: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _copy_reports(recorded, tmp_path)
    monkeypatch.chdir(tmp_path)
    code = main(shlex.split(REPLAY_WITH_RECORDING)[1:])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "no recording" not in out
    assert "assumed: the caller's audio is the recording's channel 0 (22.00 s from 0.00 s)" in out
    assert "hears a word only from recorded frames that reached it" in out
    # the recording has the four words said over the protected hold message; livekit withholds
    # them from the STT on Agent as it did in the call, and ResilientAgent gets them through
    assert "Agent (as recorded): faithful: same 2 caller turn(s), same words lost (4)" in out
    assert "ResilientAgent: PASS  lost words 0" in out
    # docs/replay.md shows what it prints, on the release it names
    guide = (Path(__file__).parents[1] / "docs" / "replay.md").read_text()
    installed = f"(livekit-agents {installed_livekit_version()})"
    assert out.replace(installed, "(livekit-agents 1.8.9)") in guide, out


def test_a_call_whose_caller_the_transcripts_cannot_rebuild_round_trips_with_its_recording(
    tmp_path: Path,
) -> None:
    # a stuck VAD held the caller's turn open over the hold message: from the transcripts alone
    # the replay misplaced the caller's words; the recording has them where they were said
    scenario = next(s for s in CATALOG if s.name == "vad/stuck_over_hold_message")
    trip = round_trip(scenario, Agent, tmp_path)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


@pytest.mark.parametrize(
    ("name", "turns"),
    [
        # the first turn's words were withheld under a protected line and committed with the
        # second's transcript: each turn said its own words, not the whole message twice
        (
            "lost_words/pause_over_protected_say",
            [["is", "the", "terrace", "open"], ["tonight", "please"]],
        ),
        # and a word of the second turn said over the hold message, never transcribed, is the
        # second turn's (before its transcribed words), not the first's nor a placeholder
        (
            "lost_words/pause_over_hold_message",
            [
                ["please", "book", "a", "table", "for", "eight"],
                ["for", "four", "people", "outside"],
                ["near", "the", "window", "if", "possible"],
            ],
        ),
    ],
)
def test_a_withheld_turn_committed_with_the_next_says_only_its_own_words(
    tmp_path: Path, name: str, turns: list[list[str]]
) -> None:
    scenario = next(s for s in CATALOG if s.name == name)
    resilient = load_agent_class(RESILIENT_PATH)
    world, _ = run_scenario(scenario, resilient)
    plan = load_plan(session_report(world))
    assert [list(t.heard) for t in plan.turns] == turns
    assert [t.unheard for t in plan.turns] == [0] * len(turns)
    trip = round_trip(scenario, resilient, tmp_path)
    assert trip.faithful, trip.divergences


def test_words_withheld_by_a_line_begun_in_the_callers_turn_are_placeholders(
    tmp_path: Path,
) -> None:
    # the caller began while the agent was thinking; its protected hold message began over
    # them: the transcribed words came after it, not spread from the turn's start
    scenario = next(
        s for s in CATALOG if s.name == "talk_over/caller_keeps_talking_over_hold_message"
    )
    world, _ = run_scenario(scenario, Agent)
    turn = load_plan(session_report(world)).turns[1]
    assert " ".join(turn.heard) == "quiet corner near the window if you can"
    assert turn.unheard >= 5
    trip = round_trip(scenario, Agent, tmp_path)
    # the replay's caller says them where livekit let them through: the agent repeats them
    assert not [d for d in trip.divergences if "the agent said" in d], trip.divergences


def test_noise_the_vad_heard_as_speech_carries_no_words_on_the_recording(
    tmp_path: Path,
) -> None:
    # hold music from 1 s to 25 s, the question at 3.0-4.6 s: the question's words go where
    # the transcripts put them (not over the music), and the turns the noise guard split off
    # the music have none, so the replayed Watchdog ends the turn when the recorded one did
    scenario = next(s for s in CATALOG if s.name == "stall/question_under_hold_music")
    resilient = load_agent_class(RESILIENT_PATH)
    world, _ = run_scenario(scenario, resilient)
    turns = load_plan(session_report(world)).turns
    assert turns[0].said == pytest.approx((3.0, 4.6), abs=0.02)
    assert [t.noise for t in turns] == [False, True, True]
    trip = round_trip(scenario, resilient, tmp_path)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


def _write_audio(path: Path, channels: int, seconds: float) -> Path:
    """An Ogg Opus file of a quiet tone, as livekit's recorder encodes (48 kHz)."""
    rate = 48_000
    with av.open(str(path), mode="w", format="ogg") as container:
        stream: Any = container.add_stream(
            "libopus", rate=rate, layout="stereo" if channels == 2 else "mono"
        )
        t = np.arange(round(seconds * rate)) / rate
        tone = (np.sin(2 * np.pi * 220 * t) * 0.1).astype(np.float32)
        frame = av.AudioFrame.from_ndarray(
            np.stack([tone] * channels), format="fltp", layout=stream.layout.name
        )
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return path


def _error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["replay", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_recording_that_is_not_the_calls_is_one_line_naming_what_is_wrong(
    recorded: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path, _ = recorded
    report = str(report_path)
    text = tmp_path / "notes.ogg"
    text.write_text("not audio at all\n")
    assert "--recording: " in _error(capsys, report, "--recording", str(text))
    assert "not an audio file" in _error(capsys, report, "--recording", str(text))
    mono = _write_audio(tmp_path / "mono.ogg", 1, 22.0)
    assert "channels: 1, expected 2" in _error(capsys, report, "--recording", str(mono))
    short = _write_audio(tmp_path / "short.ogg", 2, 1.0)
    err = _error(capsys, report, "--recording", str(short))
    assert "1.00 s long" in err and "last turn ends at 5.40 s (events)" in err
    missing = str(tmp_path / "none.ogg")
    assert "no such file" in _error(capsys, report, "--recording", missing)
    late = json.loads(report_path.read_text())
    late["audio_recording_started_at"] += 4.0
    late_path = tmp_path / "late.json"
    late_path.write_text(json.dumps(late))
    err = _error(capsys, str(late_path), "--recording", str(recorded[1]))
    assert "audio_recording_started_at: the recording starts at 4.00 s" in err
    late["audio_recording_started_at"] = "soon"
    late_path.write_text(json.dumps(late))
    err = _error(capsys, str(late_path), "--recording", str(recorded[1]))
    assert "audio_recording_started_at: expected a number" in err
    assert "--recording goes with a REPORT" in _error(
        capsys, "--round-trip", "--recording", str(mono)
    )


# docs/replay.md's commands: the recording the report names, and none
REPLAY = "resilient-agent replay reports/Agent/tool_gap__gap_disallow_and_say.json"
REPLAY_WITHOUT_RECORDING = (
    "resilient-agent replay reports/Agent/tool_gap__gap_disallow_and_say.json --no-recording"
)


def test_the_replay_finds_the_recording_the_report_names_and_says_so(
    recorded: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _copy_reports(recorded, tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(shlex.split(REPLAY)[1:]) == 0
    out = capsys.readouterr().out
    audio = "reports/Agent/tool_gap__gap_disallow_and_say.ogg"
    assert f"recording: {audio} (the report's audio_recording_path);" in out
    assert "assumed: the caller's audio is the recording's channel 0" in out
    assert main(shlex.split(REPLAY_WITHOUT_RECORDING)[1:]) == 0
    without = capsys.readouterr().out
    assert "\nrecording:" not in without and "no recording: the caller's audio is made" in without
    guide = (Path(__file__).parents[1] / "docs" / "replay.md").read_text()
    installed = f"(livekit-agents {installed_livekit_version()})"
    for printed in (out, without):
        assert printed.replace(installed, "(livekit-agents 1.8.9)") in guide, printed


def test_a_relative_recording_path_is_the_reports_and_a_missing_one_is_named(
    recorded: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path, audio_path = recorded
    report = json.loads(report_path.read_text())
    (tmp_path / "calls").mkdir()
    shutil.copy(audio_path, tmp_path / "calls" / "audio.ogg")
    report["audio_recording_path"] = "audio.ogg"  # from the report's folder, not the cwd
    (tmp_path / "calls" / "call.json").write_text(json.dumps(report))
    assert main(["replay", str(tmp_path / "calls" / "call.json")]) == 0
    assert "(the report's audio_recording_path);" in capsys.readouterr().out
    report["audio_recording_path"] = "/gone/audio.ogg"  # the job's removed session directory
    (tmp_path / "calls" / "call.json").write_text(json.dumps(report))
    assert main(["replay", str(tmp_path / "calls" / "call.json")]) == 0
    out = capsys.readouterr().out
    assert "audio_recording_path /gone/audio.ogg is not there: give the call's audio" in out
    assert "no recording: the caller's audio is made" in out


def test_an_emitted_test_replays_the_recording_copied_beside_it(
    recorded: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import runpy

    report_path, audio_path = recorded
    emitted = tmp_path / "tests" / "test_incident.py"
    args = ["replay", str(report_path), "--recording", str(audio_path)]
    assert main([*args, "--emit-test", str(emitted)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {emitted}, {emitted.with_suffix('.ogg')}" in out
    source = emitted.read_text()
    assert "RECORDING = Path(__file__).with_name('test_incident.ogg')" in source
    module = runpy.run_path(str(emitted))
    module["test_the_replay_is_faithful_on_plain_agent"]()
    module["test_resilientagent_keeps_the_call"]()
    # the replay of the emitted test is the recording's: a silent recording loses the words
    silent = _write_audio(emitted.with_suffix(".ogg"), 2, 22.0)
    assert silent == emitted.with_suffix(".ogg")
    with pytest.raises(AssertionError):
        runpy.run_path(str(emitted))["test_the_replay_is_faithful_on_plain_agent"]()
    # --redact cannot redact audio: the test replays without it
    redacted_test = tmp_path / "tests" / "test_redacted.py"
    assert main([*args, "--emit-test", str(redacted_test), "--redact"]) == 0
    assert "the test replays without the recording: --redact" in capsys.readouterr().out
    assert "RECORDING" not in redacted_test.read_text()


def test_a_recording_the_labs_energy_vad_heard_gives_silero_no_turn_ends_to_follow(
    recorded: tuple[Path, Path],
) -> None:
    report_path, audio_path = recorded
    report = json.loads(report_path.read_text())
    plan = load_plan(report)
    assert read_recording(audio_path, report, plan).caller.silero_ends == ()
    # the same call as a production report (no lab tag): Silero hears it, and may follow them
    untagged = {**report, "tags": []}
    ends = read_recording(audio_path, untagged, plan).caller.silero_ends
    assert ends == tuple(t.end for t in plan.turns)
