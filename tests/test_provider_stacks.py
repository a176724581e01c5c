"""The real provider plugins against the local wire emulators (``lab --stack``).

A few catalog calls per stack, a few seconds each: the full catalog per stack is
``resilient-agent lab --stack NAME``.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import scenarios
from resilient_agent.lab.catalog.agents import FILLER
from resilient_agent.lab.cli import main
from resilient_agent.lab.stacks import stack_variants
from resilient_agent.lab.timeline import extract_timeline
from resilient_agent.testing import Scenario, heard_sentences, run_scenario
from resilient_agent.testing.emulators import DeepgramEmulator, DeepgramFaults
from resilient_agent.testing.stacks import STACKS

pytest.importorskip("livekit.plugins.deepgram", exc_type=ImportError)
pytest.importorskip("livekit.plugins.cartesia", exc_type=ImportError)
pytest.importorskip("livekit.plugins.openai", exc_type=ImportError)
pytest.importorskip("livekit.plugins.google", exc_type=ImportError)

NON_STREAMING = "openai-stt+openai+cartesia"


def _scenario(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


@pytest.mark.parametrize("stack", [name for name, spec in STACKS.items() if not spec.realtime])
def test_a_race_free_call_passes_on_both_agents_and_every_part_went_over_the_wire(
    stack: str,
) -> None:
    for agent in (Agent, ResilientAgent):
        world, outcome = run_scenario(_scenario("control/two_turns"), agent, stack=stack)
        assert outcome.passed, (stack, agent.__name__, outcome.reasons)
        assert [text for _, text, _ in world.stt.finals] == [
            "do you have a terrace",
            "great thanks",
        ]
        assert world.tts.sentences == {
            1: "Sure: do you have a terrace.",
            2: "Sure: great thanks.",
        }
        assert [r.last_user_text for r in world.llm.requests] == [
            "do you have a terrace",
            "great thanks",
        ]
        assert any("/tts/websocket" in path for path in world.connections)


def test_a_recovery_on_deepgram_is_one_pre_recorded_request_not_a_second_socket() -> None:
    # the live stream ends only at its next KeepAlive tick (5 s) after CloseStream: a recovery
    # through a fresh stream made the answer late; recognize() is one request
    world, outcome = run_scenario(
        _scenario("lost_words/over_protected_say"), ResilientAgent, stack="deepgram+openai+cartesia"
    )
    assert outcome.passed, outcome.reasons
    assert world.connections["deepgram-emulator ws /v1/listen"] == 1
    assert world.connections["deepgram-emulator http /v1/listen"] == 1


def test_the_listening_socket_is_the_only_extra_one_and_closes_with_its_window() -> None:
    # while the protected hold message plays over the caller, CallerWords listens through a
    # stream of the session's STT: on Deepgram a second live socket, counted against the
    # provider's concurrency limit; it must close when the window ends, not live on
    world, outcome = run_scenario(
        _scenario("tool_gap/gap_protected_say"), ResilientAgent, stack="deepgram+openai+cartesia"
    )
    assert outcome.passed, outcome.reasons
    assert isinstance(world.stt, DeepgramEmulator)
    livekits, listening = world.stt.sockets
    assert world.stt.most_open_at_once("/v1/listen") == 2
    assert listening.closed_at is not None and livekits.closed_at is not None
    assert listening.closed_at - listening.opened_at < 1.5
    assert livekits.closed_at - livekits.opened_at > 20.0
    # a race-free call opens nothing more than livekit does
    world, _ = run_scenario(
        _scenario("control/two_turns"), ResilientAgent, stack="deepgram+openai+cartesia"
    )
    assert isinstance(world.stt, DeepgramEmulator)
    assert len(world.stt.sockets) == 1


def test_the_words_of_a_socket_dropped_mid_utterance_are_recovered() -> None:
    # Deepgram closes the socket 1 s into "do you have a terrace": the plugin reconnects on its
    # own (livekit reports a recoverable error), and the words the dropped socket was hearing
    # are gone on a plain Agent
    scenario = _scenario("control/two_turns")
    drop = DeepgramFaults(drop_after_s=2.0)
    stack = "deepgram+openai+cartesia"
    _, plain = run_scenario(scenario, Agent, stack=stack, deepgram_faults=drop)
    world, resilient = run_scenario(scenario, ResilientAgent, stack=stack, deepgram_faults=drop)
    assert any("never reached the LLM" in reason for reason in plain.reasons), plain.reasons
    assert resilient.passed, resilient.reasons
    assert world.connections["deepgram-emulator ws /v1/listen"] == 2
    assert ("race_detected", "stt_reconnected") in {
        (race["event"], race["kind"]) for race in resilient.race_events
    }
    # a connection refused (429) before the caller spoke lost nothing: no alarm
    refused = DeepgramFaults(refuse_with=429, refusals=1)
    world, control = run_scenario(scenario, ResilientAgent, stack=stack, deepgram_faults=refused)
    assert control.passed, control.reasons
    assert world.connections["deepgram-emulator ws /v1/listen"] == 2
    assert control.race_events == []


def test_a_deepgram_socket_that_goes_silent_is_restarted_and_its_words_recovered() -> None:
    # the socket takes audio and answers nothing from 0.5 s of audio on, with no error: the
    # plugin never reconnects, and a plain Agent loses every word of the call
    scenario = _scenario("control/two_turns")
    silent = DeepgramFaults(silent_after_s=0.5)
    stack = "deepgram+openai+cartesia"
    _, plain = run_scenario(scenario, Agent, stack=stack, deepgram_faults=silent)
    assert plain.lost_words == 7
    assert plain.reply_latencies_s == [None, None]
    world, resilient = run_scenario(scenario, ResilientAgent, stack=stack, deepgram_faults=silent)
    assert resilient.lost_words == 0
    assert all(latency is not None for latency in resilient.reply_latencies_s)
    kinds = [(race["kind"], race["action"]) for race in resilient.race_events]
    assert kinds[:3] == [
        ("stt_silent", None),
        ("stt_silent", "restarted_stream"),
        ("stt_silent", "recovered_words"),
    ]
    # a fresh socket for the rest of the call, one pre-recorded request for the lost words
    assert world.connections["deepgram-emulator ws /v1/listen"] == 2
    assert world.connections["deepgram-emulator http /v1/listen"] == 1


def test_words_recovered_over_a_protected_speech_are_answered_as_on_the_scripted_stt() -> None:
    # "thanks", said over the protected filler, is recovered by one pre-recorded request
    # 0.15 s after the caller stopped; the turn delay is counted from the caller's last sound,
    # not from the request's return nor again from the filler's end (livekit's turn never held
    # the words): answered as on the scripted STT, not 0.68 s later
    scenario = _scenario("vad/dead_caller_speaks_during_recovery")
    _, outcome = run_scenario(scenario, ResilientAgent, stack="deepgram+openai+cartesia")
    assert outcome.passed, outcome.reasons
    assert outcome.lost_words == 0
    _, scripted = run_scenario(scenario, ResilientAgent)
    assert outcome.reply_latencies_s == scripted.reply_latencies_s


def test_words_a_stuck_vad_kept_from_a_non_streaming_stt_are_answered_as_the_callers_turn() -> None:
    # the VAD dies in the first question: livekit's StreamAdapter never transcribes it, and the
    # Watchdog's restart ends livekit's turn with no transcript. The recovered words are that
    # turn: answered at once through the app's on_user_turn_completed (its protected filler),
    # so "thanks", said over the filler, is answered as it ends, as on the scripted STT; they
    # waited for livekit's turn delay before and joined "thanks" after its filler, 7.82 s
    scenario = _scenario("vad/dead_caller_speaks_during_recovery")
    _, plain = run_scenario(scenario, Agent, stack=NON_STREAMING)
    assert not plain.passed
    world, outcome = run_scenario(scenario, ResilientAgent, stack=NON_STREAMING)
    assert outcome.passed, outcome.reasons
    assert outcome.lost_words == 0
    assert ("stuck_vad_withheld_words", "answered_as_user_turn") in {
        (race["kind"], race["action"]) for race in outcome.race_events
    }
    filler = heard_sentences(world)[0]
    assert filler.text == FILLER
    # begun before "thanks" (6.36 s), which falls over it
    assert filler.started_at is not None and filler.started_at < 6.36
    _, scripted = run_scenario(scenario, ResilientAgent)
    assert outcome.reply_latencies_s == scripted.reply_latencies_s


def test_an_openai_stream_of_keep_alive_chunks_is_asked_again() -> None:
    # the emulator sends a role-only chunk and then an empty delta every second, never a
    # token: the openai plugin's read timeout never fires, and a plain Agent never answers
    scenario = _scenario("provider/llm_keeps_alive_without_tokens")
    stack = "deepgram+openai+cartesia"
    world, plain = run_scenario(scenario, Agent, stack=stack)
    assert plain.reply_latencies_s == [None]
    assert world.connections["openai-emulator http /v1/chat/completions"] == 1
    world, resilient = run_scenario(scenario, ResilientAgent, stack=stack)
    assert resilient.passed, resilient.reasons
    assert world.connections["openai-emulator http /v1/chat/completions"] == 2
    assert ("thinking_without_speech", "asked_for_the_reply_again") in {
        (race["kind"], race["action"]) for race in resilient.race_events
    }


def test_a_cartesia_error_mid_context_is_survived_as_on_the_scripted_tts() -> None:
    # Cartesia answers the reply's second sentence with an error message, mid-context: the
    # rest of that reply is lost and the next question is answered, on both agents, exactly
    # as the scripted TTS's error on that sentence
    scenario = _scenario("control/tts_error_mid_reply")
    assert "a scripted fault" not in str(stack_variants([scenario])[1])
    for agent in (Agent, ResilientAgent):
        world, outcome = run_scenario(scenario, agent, stack="deepgram+openai+cartesia")
        assert outcome.passed, outcome.reasons
        heard = {s.text: s.heard for s in heard_sentences(world)}
        assert heard["We make a lemon tart."] > 0
        assert heard["We also have a chocolate mousse."] == 0
        assert outcome.reply_latencies_s == [pytest.approx(1.2, abs=0.05)]
        assert outcome.race_events == []


# livekit's ids come from each virtual loop's own seeded stream: two calls of one process differ
_ID = re.compile(r"\b([a-z]+)_[0-9a-f]{12}\b")


def test_a_stack_call_replays_the_same_timeline() -> None:
    scenario = _scenario("tool_gap/gap_protected_say")
    runs = []
    for _ in range(2):
        world, outcome = run_scenario(scenario, ResilientAgent, stack="deepgram+openai+cartesia")
        timeline = extract_timeline(world, outcome, agent="r", agent_label="r", onset=None)
        text = json.dumps(timeline.as_dict(), sort_keys=True)
        runs.append((_ID.sub(r"\1_ID", text), world.connections))
    assert runs[0] == runs[1]


def test_the_race_reproduces_on_agent_and_passes_on_resilient_agent_with_gemini() -> None:
    # a function call that arrives whole (Gemini's end_call) and the caller speaking after it
    scenario = _scenario("end_call/livekit_tool_caller_speaks_after_goodbye")
    _, plain = run_scenario(scenario, Agent, stack="deepgram+google+cartesia")
    world, resilient = run_scenario(scenario, ResilientAgent, stack="deepgram+google+cartesia")
    assert not plain.passed
    assert resilient.passed, resilient.reasons
    assert any(r.tool_calls for r in world.llm.requests)


@pytest.mark.parametrize("stack", ["deepgram+openai+cartesia", "deepgram+google+cartesia"])
def test_a_tool_reply_does_not_answer_again_a_question_another_reply_answers(stack: str) -> None:
    # the provider's format moves the tool's output up to its call: the tool reply's context
    # ends, on the wire, in the question the caller asked as the tool ended, whose own reply is
    # still playing; the scripted LLM (time order) never showed it
    scenario = _scenario("control/question_as_a_long_tool_ends")
    _, plain = run_scenario(scenario, Agent, stack=stack)
    world, resilient = run_scenario(scenario, ResilientAgent, stack=stack)
    assert any("answer heard 2 times" in reason for reason in plain.reasons), plain.reasons
    assert resilient.passed, resilient.reasons
    assert [(r.last_user_text, r.last_tool) for r in world.llm.requests][-2:] == [
        ("what time do you close tonight", None),
        (None, "book_table"),
    ]


def test_no_word_is_lost_over_protected_speech_with_a_non_streaming_stt() -> None:
    # openai.STT() transcribes whole requests: livekit wraps it in a StreamAdapter with the VAD,
    # and the library's own recovery must not open a stream of it
    scenario = _scenario("lost_words/over_protected_say")
    _, plain = run_scenario(scenario, Agent, stack=NON_STREAMING)
    world, resilient = run_scenario(scenario, ResilientAgent, stack=NON_STREAMING)
    assert not plain.passed
    assert resilient.passed, resilient.reasons
    # livekit's StreamAdapter heard silence in place of the words: the one transcription is
    # the recovery's, of the audio livekit withheld
    assert world.connections["openai-emulator http /v1/audio/transcriptions"] == 1
    assert [text for _, text, _ in world.stt.finals] == ["hello can you hear me"]


def test_a_dead_vad_loses_no_word_with_a_non_streaming_stt() -> None:
    # livekit's StreamAdapter cuts the caller's audio with a VAD stream of its own: restarting
    # the agent's VAD left that one dead, and the non-streaming STT never heard the caller
    scenario = _scenario("vad/dead_plain_agent")
    _, plain = run_scenario(scenario, Agent, stack=NON_STREAMING)
    _, resilient = run_scenario(scenario, ResilientAgent, stack=NON_STREAMING)
    assert any("never reached the LLM" in reason for reason in plain.reasons), plain.reasons
    assert resilient.passed, resilient.reasons
    assert resilient.lost_words == 0


def test_an_unknown_stack_lists_the_stacks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "--stack", "deepgram+gpt"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert all(name in line for name in STACKS)


def test_a_stack_whose_plugin_is_missing_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_find_spec = importlib.util.find_spec

    def without_cartesia(name: str, *args: object) -> object:
        return None if name == "livekit.plugins.cartesia" else real_find_spec(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", without_cartesia)
    assert main(["lab", "--stack", "deepgram+openai+cartesia", "--only", "control/two"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "livekit-plugins-cartesia" in line and "resilient-agent[providers]" in line


def test_the_stacks_leave_out_what_no_wire_can_play() -> None:
    runnable, left_out = stack_variants(scenarios())
    assert all(s.model == "pipeline" for s in runnable)
    reasons = {o.scenario: o.why for o in left_out}
    assert any("realtime" in why for why in reasons.values())
    assert any("scripted fault" in why for why in reasons.values())


def test_a_reply_interrupted_after_the_caller_stopped_is_released_by_the_watchdog() -> None:
    # a non-streaming STT's final comes after the VAD's end of speech: livekit interrupts the
    # reply (paused since the caller began) with no change of state the watchdog woke on
    scenario = _scenario("stall/lost_playout_report")
    _, plain = run_scenario(scenario, Agent, stack=NON_STREAMING)
    world, resilient = run_scenario(scenario, ResilientAgent, stack=NON_STREAMING)
    assert not plain.passed
    assert resilient.passed, resilient.reasons
    assert "reported_playout_for_output" in [e.get("action") for e in world.race_events]


def test_a_non_streaming_stt_leaves_out_races_needing_transcripts_as_the_caller_talks() -> None:
    streaming, _ = stack_variants(scenarios(), "deepgram+openai+cartesia")
    runnable, left_out = stack_variants(scenarios(), NON_STREAMING)
    reasons = {o.scenario: o.why for o in left_out}
    assert {s.name for s in streaming} - {s.name for s in runnable} == {
        "turn_limit/words_over_cut_in",
        "turn_limit/words_over_cut_in_on_plain_agent",
        "control/turn_limit_cut_in",
        "stall/question_under_hold_music",
    }
    assert "user_turn_limit" in reasons["control/turn_limit_cut_in"]
    assert "noise" in reasons["stall/question_under_hold_music"]
    # the app's own cut-in needs no transcript, and music that stops in time ends the turn
    assert {"turn_limit/words_over_app_cut_in", "control/noise_stops_after_question"} <= {
        s.name for s in runnable
    }


def test_words_transcribed_after_livekit_answered_their_turn_replace_that_reply() -> None:
    # "what is on the menu" (1.0-2.81 s); the caller goes on from 3.43 s to 7.75 s. A
    # non-streaming STT's transcript of the rest comes 0.15 s after the VAD's end of speech
    # (8.45 s), after livekit committed the turn with the first sentence only (8.3 s): the
    # reply made then, queued behind the protected filler, was made without those words
    scenario = _scenario("talk_over/caller_keeps_talking_over_filler")
    world, resilient = run_scenario(scenario, ResilientAgent, stack=NON_STREAMING)
    assert resilient.passed, resilient.reasons
    # one reply takes in all four sentences, the instant the filler ends (10.92 s), not
    # after a reply to the first sentence alone (4.90 s before)
    assert resilient.reply_latencies_s[-1] == pytest.approx(3.17, abs=0.01)
    assert "answered_instead_of_stale_reply" in [e.get("action") for e in world.race_events]


def test_a_non_streaming_stt_s_request_time_counts_before_the_reply_bound() -> None:
    # livekit hands the STT an utterance at the VAD's end of speech, and its transcript comes
    # one request later (0.15 s on the emulator), where the scripted STT's final is already in:
    # the filler, asked for 0.15 s later, first sounds as the caller begins "and any vegan
    # options" again, waits for them, and the answer follows it at once (3.02 s, bound 3.0 s)
    scenario = _scenario("lost_words/protected_filler")
    world, outcome = run_scenario(scenario, ResilientAgent, stack=NON_STREAMING)
    transcriptions = world.connections["openai-emulator http /v1/audio/transcriptions"]
    assert transcriptions >= 2
    assert world.transcript_lag_s == pytest.approx(0.15, abs=0.005)
    # the latencies are the caller's: only the bound counts from when a transcript could exist
    assert outcome.reply_latencies_s[1] == pytest.approx(3.02, abs=0.005)
    assert outcome.passed, outcome.reasons
    # a streaming STT's finals come before the VAD's end of speech; the scripted STT's too
    world, _ = run_scenario(scenario, ResilientAgent, stack="deepgram+openai+cartesia")
    assert world.transcript_lag_s == 0.0
    world, _ = run_scenario(scenario, ResilientAgent)
    assert world.transcript_lag_s == 0.0


def test_a_hold_past_its_bound_asks_a_non_streaming_stt_whether_the_caller_says_words() -> None:
    # the caller talks 3.4 s to 8.8 s with pauses the VAD never ends speech in, over a
    # transfer's protected message held from 3.5 s: the StreamAdapter hands the STT nothing
    # until the VAD's end of speech (9.35 s), and the message played at its 3 s bound (6.5 s),
    # 0.70 s over "and nobody answered the phone"; one request over the audio since the last
    # look says the caller is still saying words, as a streaming STT's interims do
    scenario = _scenario("talk_over/caller_keeps_talking_through_handoff_hold")
    world, outcome = run_scenario(scenario, ResilientAgent, stack=NON_STREAMING)
    assert outcome.passed, outcome.reasons
    assert outcome.lost_words == 0
    actions = [e.get("action") for e in world.race_events]
    assert "extended_wait" in actions and "spoke_at_bound" not in actions
    # a look each time the evidence ran out, while the caller talked: a few requests at most
    assert world.connections["openai-emulator http /v1/audio/transcriptions"] <= 8
