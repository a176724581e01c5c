"""The lab with real speech: espeak-ng voices, Silero, PocketSphinx, the reference-WER contract."""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.catalog.agents import FAREWELL
from resilient_agent.lab.real_speech_variants import LeftOut, real_speech_variant, with_real_speech
from resilient_agent.testing import Scenario, Utterance, run_scenario
from resilient_agent.testing.audio import FRAME_SAMPLES, read_markers
from resilient_agent.testing.speech import load_wav
from resilient_agent.testing.transcripts import _judge, utterance_transcripts
from resilient_agent.testing.tts import ScriptedTTS
from resilient_agent.testing.vad import SILENCE_TO_END_SPEECH


def _has(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


_NEEDS = []
if not _has("pocketsphinx"):
    _NEEDS.append("pocketsphinx (pip install 'resilient-agent[speech]')")
if shutil.which("espeak-ng") is None:
    _NEEDS.append("espeak-ng (apt-get install espeak-ng)")
if _NEEDS and os.environ.get("CI"):
    raise RuntimeError(f"CI must install {', '.join(_NEEDS)} (see .ci/run)")
needs_speech = pytest.mark.skipif(bool(_NEEDS), reason=f"needs {', '.join(_NEEDS)}")


def _scenario(name: str) -> Scenario:
    return next(s for s in CATALOG if s.name == name)


@pytest.fixture(autouse=True)
def _speech_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path_factory.getbasetemp() / "speech-cache"
    monkeypatch.setenv("RESILIENT_AGENT_SPEECH_CACHE", str(cache))


# -- the word alignment (no audio needed) ------------------------------------------------------


def test_alignment_gives_each_utterance_its_words_and_errors() -> None:
    reference = ["please", "book", "a", "table", "we", "it", "nine", "instead"]
    owner = [0, 0, 0, 0, 1, 1, 1, 1]
    hypothesis = [
        "please",
        "book",
        "a",
        "table",
        "actually",
        "make",
        "it",
        "nine",
        "instead",
        "we",
        "it",
        "nine",
        "instead",
    ]
    errors, reached = _judge(reference, owner, hypothesis, 2)
    # the first utterance reached the LLM whole; the recovered duplicate belongs to the second
    assert errors[0] == 0 and reached[0] == ["please", "book", "a", "table"]
    assert errors[1] == 5
    assert " ".join(reached[1]) == "actually make it nine instead we it nine instead"


def test_alignment_counts_a_lost_utterance_whole() -> None:
    errors, reached = _judge(["hello", "there", "bye"], [0, 0, 1], ["bye"], 2)
    assert errors == [2, 0]
    assert reached == [[], ["bye"]]


def test_turn_keeper_drops_live_words_a_recovery_heard_a_little_differently() -> None:
    from resilient_agent.middleware.turn_keeper.transcript_match import (
        remove_heard as _remove_heard,
    )

    # the live stream heard the end of the window as 'we it nine instead'
    assert _remove_heard("actually make it nine instead", "we it nine instead") == "actually"
    # exactly heard words go, as before
    assert _remove_heard("I want to change my booking please", "my booking please") == (
        "I want to change"
    )
    # something else entirely stays
    assert _remove_heard("hello there", "something else entirely") == "hello there"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("vad/stuck_plain_agent", "scripted VAD fault"),
        ("lost_words/typed_over_protected_say", "typed chat message"),
        ("stall/reply_waits_for_noise", "synthetic noise"),
    ],
)
def test_races_real_audio_cannot_reproduce_are_left_out_with_the_reason(
    name: str, why: str
) -> None:
    result = real_speech_variant(_scenario(name))
    assert isinstance(result, LeftOut)
    assert why in result.why


# -- real speech end to end --------------------------------------------------------------------


@needs_speech
def test_variant_says_the_script_and_expects_the_reference() -> None:
    scripted = _scenario("lost_words/straddling_protected_end")
    variant = real_speech_variant(scripted)
    assert isinstance(variant, Scenario) and variant.real_speech is not None
    assert variant.vad == "silero"
    (utterance,) = variant.utterances
    assert variant.real_speech.said == (scripted.utterances[0].text,)
    assert utterance.start == scripted.utterances[0].start
    assert utterance.audio is not None and Path(utterance.audio).is_file()
    # the text is what the recognizer hears in the clean recording, misheard words included
    references = variant.real_speech.references(load_wav(Path(utterance.audio)))
    assert len(references) == 3
    assert utterance.text == references[0]
    assert variant.real_speech.candidates(0, utterance.text) == tuple(dict.fromkeys(references))


@needs_speech
def test_words_over_protected_speech_are_lost_on_agent_and_recovered_on_resilient_agent() -> None:
    variant = real_speech_variant(_scenario("lost_words/over_protected_say"))
    assert isinstance(variant, Scenario)

    world, outcome = run_scenario(variant, Agent)
    assert not outcome.passed
    assert any("word error rate 1.00" in r for r in outcome.reasons), outcome.reasons
    (lost,) = utterance_transcripts(world)
    assert lost.live == "" and lost.reached_llm == ""
    assert outcome.lost_words == len(lost.reference.split())

    world, outcome = run_scenario(variant, ResilientAgent)
    assert outcome.passed, outcome.reasons
    (kept,) = utterance_transcripts(world)
    # livekit withheld the audio from the live stream; the recovery re-transcribed it
    assert kept.live == ""
    assert world.stt.recovered and kept.word_error_rate <= 0.34
    assert kept.reached_llm == kept.reference
    assert outcome.lost_words == 0


@needs_speech
def test_agent_voice_is_espeak_with_sentence_markers() -> None:
    variant = real_speech_variant(_scenario("lost_words/over_protected_say"))
    assert isinstance(variant, Scenario) and variant.real_speech is not None
    voice = variant.real_speech.voice()
    audio = voice.sentence_audio("Your table is booked.", 7)
    frames = len(audio) // FRAME_SAMPLES
    assert len(audio) == frames * FRAME_SAMPLES
    assert voice.duration_of("Your table is booked.") == pytest.approx(frames * 0.01)
    markers = read_markers(audio)
    assert len(markers) == frames and {m.source_id for m in markers} == {7}
    # real speech under the markers, not the scripted tone
    assert np.abs(audio.astype(np.int32)).mean() > 100


@needs_speech
def test_cli_json_names_the_speech_and_the_stt(tmp_path: Path) -> None:
    from resilient_agent.lab.cli import main

    out = tmp_path / "out.json"
    code = main(
        ["lab", "--speech", "real", "--only", "over_protected_say$", "--quiet", "--json", str(out)]
    )
    records = json.loads(out.read_text())["results"]
    assert code == 0
    assert {r["speech"] for r in records} == {"real"}
    assert {r["stt"] for r in records} == {"pocketsphinx:pocketsphinx-en-us-phrases"}
    resilient = next(r for r in records if r["agent"].endswith("ResilientAgent"))
    (transcript,) = resilient["transcripts"]
    assert transcript["reached_llm"] == transcript["reference"]


@needs_speech
def test_left_out_races_are_listed() -> None:
    out = io.StringIO()
    chosen = [_scenario("vad/dead_plain_agent"), _scenario("lost_words/over_protected_say")]
    variants = with_real_speech(chosen, out)
    assert [v.name for v in variants] == ["lost_words/over_protected_say"]
    assert "LEFT OUT  vad/dead_plain_agent" in out.getvalue()


def test_scripted_results_say_scripted() -> None:
    from resilient_agent.lab.run import AgentUnderTest, run_lab

    scenario = dataclasses.replace(_scenario("control/two_turns"))
    (result,) = run_lab([scenario], [AgentUnderTest("livekit.agents:Agent", Agent)])
    record = result.as_json()
    assert record["speech"] == "scripted"
    assert record["stt"] == "resilient_agent.testing:scripted-marker-stt"
    assert "transcripts" not in record


# -- real speech keeps each race's timing (#22 follow-up) --------------------------------------


def _voiced_end(utterance: Utterance) -> float:
    """When the caller's voice stops in the recording (its last 10 ms frame with sound)."""
    assert utterance.audio is not None
    samples = load_wav(Path(utterance.audio))
    frames = len(samples) // FRAME_SAMPLES
    loud = np.abs(samples[: frames * FRAME_SAMPLES].reshape(frames, FRAME_SAMPLES)).max(axis=1)
    return utterance.start + (int(np.nonzero(loud > 64)[0][-1]) + 1) * FRAME_SAMPLES / 16000


@needs_speech
def test_agent_voice_lasts_as_long_as_the_scripted_tts() -> None:
    # races are timed against the scripted TTS ("the caller speaks as the goodbye ends")
    variant = real_speech_variant(_scenario("end_call/livekit_tool_caller_speaks_after_goodbye"))
    assert isinstance(variant, Scenario) and variant.real_speech is not None
    voice, scripted = variant.real_speech.voice(), ScriptedTTS()
    for text in (FAREWELL, "Please hold on while I transfer you to our manager."):
        assert voice.duration_of(text) == pytest.approx(scripted.duration_of(text), abs=0.1)


@needs_speech
def test_caller_voice_ends_where_the_scripted_utterance_ends() -> None:
    # espeak-ng closes every recording with ~0.4 s of silence: fitting the silence into the
    # scripted window sped the voice up and ended the caller's turn early
    scripted = _scenario("end_call/livekit_tool_caller_speaks_after_goodbye")
    variant = real_speech_variant(scripted)
    assert isinstance(variant, Scenario)
    goodbye = variant.utterances[0]
    assert scripted.utterances[0].end - 0.25 <= _voiced_end(goodbye) <= scripted.utterances[0].end


@needs_speech
def test_a_pause_that_ends_the_turn_stays_long_enough_for_silero() -> None:
    scripted = _scenario("lost_words/handoff_during_protected_hold")
    assert scripted.utterances[1].start - scripted.utterances[0].end >= SILENCE_TO_END_SPEECH
    variant = real_speech_variant(scripted)
    assert isinstance(variant, Scenario)
    first, second = variant.utterances
    assert second.start == scripted.utterances[1].start
    assert second.start - _voiced_end(first) >= 0.8


@needs_speech
def test_a_turn_break_too_short_for_the_words_is_left_out_with_the_reason() -> None:
    # 'is the terrace open' in 0.55 s: no voice says it with Silero's pause after it
    result = real_speech_variant(_scenario("lost_words/pause_over_protected_say"))
    assert isinstance(result, LeftOut)
    assert "pause Silero needs to end the turn" in result.why


@needs_speech
@pytest.mark.parametrize(
    ("name", "agent_fault"),
    [
        (
            "end_call/livekit_tool_caller_speaks_after_goodbye",
            "call hung up although the caller spoke after the farewell began",
        ),
        ("lost_words/handoff_during_protected_hold", "over utterance 2 and played"),
    ],
)
def test_races_timed_to_the_agents_voice_or_a_turn_break_show_with_real_speech(
    name: str, agent_fault: str
) -> None:
    variant = real_speech_variant(_scenario(name))
    assert isinstance(variant, Scenario)
    _, outcome = run_scenario(variant, Agent)
    assert any(agent_fault in reason for reason in outcome.reasons), outcome.reasons
    _, outcome = run_scenario(variant, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert outcome.lost_words == 0
