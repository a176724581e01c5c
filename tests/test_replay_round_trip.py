"""Catalog calls whose replay once diverged from the recording, round-tripped on plain Agent."""

from __future__ import annotations

from typing import Any

import pytest
from livekit.agents import Agent

from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.replay.round_trip import round_trip
from resilient_agent.lab.replay.run import run_replay


@pytest.mark.parametrize(
    "name",
    [
        # the caller left during the goodbye: livekit closes the session its own time later
        "control/caller_leaves_during_goodbye",
        # the app hung up once the caller cut its goodbye; the line's message came at the close
        "end_call/app_shutdown_from_farewell_callback",
        # the transfer tool handed the call over; the front desk's on_exit took 2 s
        "lost_words/during_handoff",
        # GetEmailTask(allow_interruptions=False): the caller's email over its question is lost
        "workflows/email_over_protected_task_question",
        # the end_call tool shut the job down while the caller's turn waited for its protected
        # farewell: livekit paused the scheduling before the turn could get a reply
        "end_call/question_over_farewell_end_protected",
        # answered 5.7 s after the caller stopped: the catalog's bound fails it, the replay too
        "tool_gap/business_logic_plain",
        # the caller spoke after the session closed: the report has no trace of it, and the
        # catalog's judge fails the replay as it failed the call
        "end_call/livekit_tool_caller_speaks_after_goodbye",
        # the app said its filler from on_user_turn_completed, before the turn's reply
        "lost_words/protected_filler",
        # livekit's EndCallTool also shut the job down and deleted the room: the report has
        # only the close, so the round trip does not judge the rest of the hang-up
        "control/livekit_tool_goodbye_heard",
        # a TaskGroup shares its conversation with each task: the second task's question
        # answers the words said to the first
        "workflows/control_task_group",
        # the caller interrupted the reply that called the tool, which went on in the
        # background: its output answered later is no sign the tool protected the reply
        "tool_gap/preamble_interrupted_before_hold_message",
        # noise with no words while the tool worked: livekit only paused the reply awaiting
        # it, so its answered output is no sign the tool protected the reply
        "stall/reply_waits_for_noise",
        # a one-sentence answer after a 3 s first token: the sentence reached the TTS as the
        # stream ended (llm_node_ttfs), not 0.2 s later as the lab's LLM streams by default
        "control/slow_llm_first_token",
        # a TTS that took 2 s to its first byte on every line (tts_node_ttfb)
        "control/slow_tts_reply",
        # an STT that sent each final 1.5 s after the caller stopped (transcription_delay)
        "control/slow_stt_final",
        # livekit's user_turn_limit cut in at a final that came after the caller's last word,
        # before the VAD's end of speech (stamped back to the speech's end) arrived
        "control/turn_limit_cut_in",
    ],
)
def test_the_call_round_trips(name: str) -> None:
    scenario = next(s for s in CATALOG if s.name == name)
    trip = round_trip(scenario, Agent)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


def test_a_tool_protecting_a_paused_preamble_is_replayed_protected() -> None:
    """The tool's disallow_interruptions() resumed its preamble over the caller, uncut."""
    from resilient_agent.lab.replay.plan import load_plan
    from resilient_agent.lab.replay.run import run_replay
    from resilient_agent.testing import run_scenario
    from resilient_agent.testing.session_report import session_report

    scenario = next(s for s in CATALOG if s.name == "tool_gap/protected_on_resume")
    world, _ = run_scenario(scenario, Agent)
    plan = load_plan(session_report(world))
    assert [r.protects_after for r in plan.tool_runs] == [1.0]  # before_s=1.0 into book_table
    replay = run_replay(plan, Agent)
    assert replay.replayed.said == plan.said  # the preamble not cut, then the booking
    assert not [d for d in replay.divergences if d.kind == "lines"]


@pytest.mark.parametrize(
    ("name", "fault"),
    [
        # every request timed out (10 s), twice
        ("provider/llm_always_times_out", "timed out"),
        # the LLM provider refused the first four attempts
        ("provider/llm_refuses_every_attempt", "refused the call's first 4 request(s)"),
        # the first sentence came with no audio, retried three times; its answer never said
        ("provider/tts_returns_no_audio", "the TTS gave no audio (retried) on sentence 1"),
        # no error event: the caller untranscribed from 7 s to the end, the agent silent
        ("provider/stt_goes_silent", "the STT took the audio and answered nothing"),
    ],
)
def test_the_providers_fail_in_the_replay_as_the_report_recorded(name: str, fault: str) -> None:
    from resilient_agent.lab.replay.plan import load_plan
    from resilient_agent.lab.replay.run import run_replay
    from resilient_agent.testing import run_scenario
    from resilient_agent.testing.session_report import session_report

    scenario = next(s for s in CATALOG if s.name == name)
    world, _ = run_scenario(scenario, Agent)
    plan = load_plan(session_report(world))
    assert any(fault in line for line in plan.assumptions), plan.assumptions
    replay = run_replay(plan, Agent)
    assert replay.replayed.faults == plan.faults  # the same errors, at the same times
    assert not replay.divergences


def test_words_recovered_after_the_transcribed_ones_are_replayed() -> None:
    """ResilientAgent recovered the words livekit withheld after 'my': the chat has them."""
    from resilient_agent import ResilientAgent

    scenario = next(s for s in CATALOG if s.name == "lost_words/handoff_during_protected_hold")
    trip = round_trip(scenario, ResilientAgent)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


def test_a_fallback_line_after_the_llm_failed_is_the_agents_recovery() -> None:
    """ResilientAgent said its fallback line after the refusals: the replay's says it once."""
    from resilient_agent import ResilientAgent

    scenario = next(s for s in CATALOG if s.name == "provider/llm_refuses_every_attempt")
    trip = round_trip(scenario, ResilientAgent)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


def test_a_divergence_is_put_down_to_its_cause() -> None:
    from resilient_agent import ResilientAgent
    from resilient_agent.lab.replay.fidelity import Divergence
    from resilient_agent.lab.replay.round_trip import cause

    plain = next(s for s in CATALOG if s.name == "control/livekit_tool_goodbye_heard")
    faulty = next(s for s in CATALOG if s.name == "provider/tts_returns_silence")
    close = (Divergence(8.45, "the session closed at 8.750 s, not 8.450 s", "close"),)
    words = (Divergence(3.0, "caller turn 2: the STT heard 'a', not 'b'", "words"), *close)
    assert cause(plain, Agent, (), True, None) is None
    assert cause(faulty, Agent, (), False, None) == "provider_fault"
    assert cause(plain, Agent, (), False, None) == "verdict_only"
    assert cause(plain, Agent, words, True, 0.3) == "caller_estimate"
    assert cause(plain, ResilientAgent, close, True, 0.3) == "hang_up_pad"
    assert cause(plain, Agent, close, True, 0.3) == "hang_up"
    late = (
        Divergence(
            9.95, "the agent's line 2 ('Sure.') begins at 10.549 s, not 9.950 s", "lines", 0.599
        ),
    )
    stuck = next(s for s in CATALOG if s.name == "tool_gap/vad_stuck")
    assert cause(plain, Agent, late, True, None) == "lines"
    assert cause(stuck, ResilientAgent, late, True, None) == "vad_fault"
    silero = next(s for s in CATALOG if s.name == "control/real_vad_two_turns")
    edge = Divergence(9.66, "caller turn 2 ends at 9.703 s, not 9.664 s", "turns", 0.039)
    after = Divergence(10.89, "the agent's line 2 begins at 10.929 s, not 10.890 s", "lines", 0.039)
    assert cause(silero, Agent, (edge, after), True, None) == "silero_opus"
    assert cause(silero, Agent, (after,), True, None) == "lines"
    assert cause(plain, Agent, (edge,), True, None) == "caller_estimate"


def test_a_line_begun_at_another_time_diverges() -> None:
    import dataclasses

    from resilient_agent.lab.replay.fidelity import divergences

    plan = _recorded_plan("control/slow_llm_first_token", Agent)
    assert plan.said_at == (6.2, 17.1)
    assert divergences(plan, plan) == []
    late = dataclasses.replace(plan, said_at=(6.2, 17.3))
    found = divergences(plan, late)
    assert [(d.kind, round(d.off_by, 3)) for d in found] == [("lines", 0.2)]
    assert "line 2 ('Yes, it is open.') begins at 17.300 s, not 17.100 s" in found[0].what
    unplayed = dataclasses.replace(plan, said_at=(6.2, None))
    assert "never plays" in divergences(plan, unplayed)[0].what


def _recorded_plan(name: str, agent_class: type[Agent]) -> Any:
    from resilient_agent.lab.replay.plan import load_plan
    from resilient_agent.testing import run_scenario
    from resilient_agent.testing.session_report import session_report

    scenario = next(s for s in CATALOG if s.name == name)
    world, _ = run_scenario(scenario, agent_class)
    return load_plan(session_report(world))


def test_a_preamble_the_caller_spoke_over_from_the_tools_start_is_protected_by_the_tool() -> None:
    """The tool's disallow_interruptions() at its start protected the preamble still playing."""
    plan = _recorded_plan("lost_words/between_call_and_output", Agent)
    assert [r.protects_after for r in plan.tool_runs] == [0.0]
    replay = run_replay(plan, Agent)
    assert replay.replayed.said == plan.said  # the preamble not cut, the words over it lost
    assert not replay.divergences


def test_words_a_middleware_put_in_the_chat_with_no_event_are_the_callers() -> None:
    """ResilientAgent committed the words withheld over the preamble beside the tool's output:
    the report's chat history has the message, no event added it."""
    from resilient_agent import ResilientAgent

    plan = _recorded_plan("lost_words/between_call_and_output", ResilientAgent)
    assert plan.user_messages[-1] == "for four people outside"
    assert plan.turns[1].heard == ("for", "four", "people", "outside")
    assert plan.turns[1].unheard == 0


def test_a_word_said_again_is_not_another_turn_committed_with_this_one() -> None:
    """'a' of 'we need a high chair' was said in the booking too: the words are still this
    turn's (recovered by ResilientAgent before the transcribed ones)."""
    from resilient_agent import ResilientAgent

    plan = _recorded_plan("vad/stuck_over_hold_message", ResilientAgent)
    heard = " ".join(plan.turns[1].heard)
    assert heard == "we need a high chair my mother will join us she likes a quiet corner"
    assert plan.turns[1].unheard == 0


def test_words_withheld_after_the_transcribed_ones_are_counted_after_them() -> None:
    """'my' was transcribed, then the protected hold message began and livekit withheld
    'order number is twelve': four placeholders after 'my', so 'my' is said where it was."""
    plan = _recorded_plan("lost_words/handoff_during_protected_hold", Agent)
    assert (plan.turns[1].heard, plan.turns[1].unheard, plan.turns[1].unheard_after) == (
        ("my",),
        0,
        4,
    )
    replay = run_replay(plan, Agent)
    assert not replay.divergences


def test_the_hang_up_pad_the_user_gives_is_waited_once() -> None:
    """ResilientAgent hung up 0.3 s after its heard goodbye: the report has only the close.

    Given the pad, the replay on ResilientAgent (which pads again) and on Agent (which does not:
    the replay waits it) both close at the recorded time; without it, ResilientAgent closes
    0.3 s late, and the replay says what it assumed."""
    from resilient_agent import ResilientAgent
    from resilient_agent.lab.replay.plan import load_plan
    from resilient_agent.testing import run_scenario
    from resilient_agent.testing.session_report import session_report

    scenario = next(s for s in CATALOG if s.name == "control/livekit_tool_goodbye_heard")
    world, _ = run_scenario(scenario, ResilientAgent)
    report = session_report(world)
    padded = load_plan(report, hang_up_pad=0.3)
    assert "the agent hung up 0.3 s after it asked to (--hang-up-pad;" in "".join(
        padded.assumptions
    )
    for agent_class in (ResilientAgent, Agent):
        replay = run_replay(padded, agent_class)
        assert not replay.divergences, (agent_class, replay.divergences)
    late = run_replay(load_plan(report), ResilientAgent)
    assert [d.kind for d in late.divergences] == ["close"]


def test_a_tool_whose_reply_outlived_the_callers_question_protected_it() -> None:
    """The caller asked while the tool worked, nothing playing; livekit did not interrupt the
    reply awaiting the tool (its output was answered): the tool disallowed interruptions."""
    plan = _recorded_plan("control/question_as_a_long_tool_ends", Agent)
    assert [r.protects_after for r in plan.tool_runs] == [0.0]
    assert any("its output was answered all the same" in line for line in plan.assumptions)
    replay = run_replay(plan, Agent)
    assert replay.replayed.said == plan.said  # the tool's reply said after the answer
    assert not replay.divergences


def test_a_providers_recorded_latency_is_replayed_when_every_line_measured_it() -> None:
    from resilient_agent.lab.replay.latency import provider_latency

    slow = provider_latency([2.0, 2.0], [1.5, 1.5])
    assert (slow.tts_ttfb, slow.stt_final_after) == (2.0, 1.5)
    assert len(slow.assumptions) == 2
    # the lab's own pace, lines that disagree, one line alone (a turn a dead VAD ended late)
    for ttfbs, delays in (([0.15, 0.15], [0.2, 0.2]), ([0.15, 2.0], [0.2, 1.5]), ([2.0], [3.51])):
        assert provider_latency(ttfbs, delays).assumptions == ()
