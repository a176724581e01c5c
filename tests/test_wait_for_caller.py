"""WaitForCaller: a protected speech waits, bounded, for a speaking caller before it plays."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

import pytest
from livekit.agents import Agent, RunContext, function_tool
from resilient_agent.middleware import default_middleware
from resilient_agent.middleware.wait_for_caller import (
    QUIET_LINE_S,
    RACE,
    SIMULTANEOUS_START_S,
    WaitForCaller,
)
from structlog.testing import capture_logs

from resilient_agent import Middleware, MiddlewareError, MiddlewareSpec, ResilientAgent
from resilient_agent.lab.catalog import agents, scenarios
from resilient_agent.testing import (
    CallOutcome,
    CallWorld,
    LLMRule,
    PlayoutAudioOutput,
    Scenario,
    ToolCallScript,
    Utterance,
    VADFault,
    run_scenario,
)
from resilient_agent.testing.contracts import protected_talk_over


def catalog(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


def resilient_with(wait: WaitForCaller) -> type[ResilientAgent]:
    """ResilientAgent whose default chain runs ``wait`` in place of the default WaitForCaller."""

    class Configured(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            chain: list[Middleware | MiddlewareSpec] = [
                wait if isinstance(mw, WaitForCaller) else mw for mw in default_middleware()
            ]
            super().__init__(*args, middleware=chain, **kwargs)

    return Configured


def events(outcome: CallOutcome) -> list[dict[str, Any]]:
    return [e for e in outcome.race_events if e["kind"] == RACE]


def hold_message(world: CallWorld) -> Any:
    (segment,) = [s for s in world.audio_out.segments if s.started_at == pytest.approx(4.0)]
    return segment


# The booking tool says its protected hold message at 4.0 s, 0.3 s into the caller's correction.
GAP = catalog("tool_gap/gap_protected_say")
# The same call, but the caller goes on correcting until 9.0 s: past a 3 s wait. Still saying
# words, they are waited for past it (tests/test_wait_for_words.py); a ``max_wait_s`` equal to
# ``wait_s`` never waits longer, and the policy past the bound decides.
LONG_TALKER = dataclasses.replace(
    GAP,
    name="test/caller_keeps_talking",
    utterances=(
        GAP.utterances[0],
        Utterance(3.7, 9.0, "actually make it nine instead and we also need a quiet corner"),
    ),
    sweep=None,
    duration=25.0,
)


def test_a_protected_speech_waits_until_the_caller_stops_then_plays_whole() -> None:
    world, outcome = run_scenario(GAP, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert outcome.talked_over_s == 0.0
    detected, handled = events(outcome)
    assert detected["event"] == "race_detected" and detected["at_s"] == pytest.approx(4.0)
    assert detected["tool"] == "book_table" and detected["held"] is True
    # the VAD ends the caller's speech 0.55 s after they stop at 5.4 s
    assert handled["action"] == "caller_stopped"
    assert handled["at_s"] == pytest.approx(5.95, abs=0.01)
    assert handled["held_s"] == pytest.approx(1.95, abs=0.01)
    segment = hold_message(world)
    # one run, from the release to the end: livekit did not resume it on its own meanwhile
    assert len(segment.runs) == 1
    assert segment.runs[0].started_at == pytest.approx(5.95, abs=0.01)
    assert segment.played == pytest.approx(len(agents.HOLD_MESSAGE) / 15, abs=0.05)
    assert not segment.interrupted
    # the tool's `await say()` waited for the held playout: the booking work starts after it
    (tool,) = world.recorder.tool_runs
    assert tool.ended_at is not None
    assert tool.ended_at - world.t0 == pytest.approx(segment.runs[0].ended_at + 2.0, abs=0.05)
    # the message reached the history once, as heard
    said = [text for _, role, text in world.recorder.items if role == "assistant"]
    assert said.count(agents.HOLD_MESSAGE) == 1


def test_plain_agent_starts_the_same_speech_over_the_caller() -> None:
    world, outcome = run_scenario(GAP, Agent)
    (over,) = protected_talk_over(world)
    assert over.seconds == pytest.approx(1.4, abs=0.02)
    assert not outcome.passed


def test_speak_past_the_bound_plays_the_speech_when_the_wait_is_over() -> None:
    scenario = dataclasses.replace(LONG_TALKER, talk_over_tolerance=None)
    world, outcome = run_scenario(scenario, resilient_with(WaitForCaller(max_wait_s=3.0)))
    _, handled = events(outcome)
    assert handled["action"] == "spoke_at_bound"
    assert handled["at_s"] == pytest.approx(7.0, abs=0.01)
    assert handled["held_s"] == pytest.approx(3.0, abs=0.01)
    segment = hold_message(world)
    assert segment.runs[0].started_at == pytest.approx(7.0, abs=0.01)
    assert not segment.interrupted
    # it played over the caller from the bound on, as "speak" says; nothing before it
    (over,) = protected_talk_over(world)
    assert over.seconds == pytest.approx(2.0, abs=0.02)
    assert outcome.lost_words == 0


def test_skip_past_the_bound_drops_the_speech_and_answers_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # RoomIO's pause outlives the segment (the lab speaker's does not): the output must be
    # resumed once the skipped speech's audio is cleared, or the next speech would stay silent
    resumed: list[float] = []
    original = PlayoutAudioOutput.resume

    def spy(self: PlayoutAudioOutput) -> None:
        resumed.append(asyncio.get_running_loop().time())
        original(self)

    monkeypatch.setattr(PlayoutAudioOutput, "resume", spy)
    wait = WaitForCaller(past_bound="skip", max_wait_s=3.0)
    world, outcome = run_scenario(LONG_TALKER, resilient_with(wait))
    assert any(7.0 <= at - world.t0 <= 7.1 for at in resumed), resumed
    assert outcome.passed, outcome.reasons
    assert outcome.talked_over_s == 0.0
    detected, handled = events(outcome)
    assert detected["held"] is True
    assert handled["action"] == "skipped_at_bound"
    assert handled["at_s"] == pytest.approx(7.0, abs=0.01)
    segment = hold_message(world)
    assert segment.interrupted and segment.played == 0.0 and segment.runs == []
    # the held say() was interrupted, so its handle records it
    (record,) = [r for r in world.recorder.speeches.values() if r.source == "say"]
    assert record.interrupted
    # the caller's correction was answered within the scenario's bound
    assert outcome.reply_latencies_s[1] is not None


def test_without_pause_capability_the_speech_is_not_held_and_that_is_logged_once() -> None:
    with capture_logs() as logs:
        world, outcome = run_scenario(dataclasses.replace(GAP, can_pause=False), ResilientAgent)
    (detected,) = events(outcome)
    assert detected["held"] is False and detected["why"] == "output_cannot_pause"
    (over,) = protected_talk_over(world)
    assert over.seconds == pytest.approx(1.4, abs=0.02)
    warnings = [r for r in logs if r["event"] == "protected_speech_not_held"]
    assert len(warnings) == 1
    assert "cannot pause" in warnings[0]["why"]
    # the turn keeper still delivers the words said over it
    assert outcome.lost_words == 0


def test_holds_and_releases_are_logged_once_each() -> None:
    with capture_logs() as logs:
        run_scenario(GAP, ResilientAgent)
    logged = [
        (r["event"], r.get("action"), r["details"].get("held"))
        for r in logs
        if r["event"] in ("race_detected", "race_handled") and r.get("kind") == RACE
    ]
    assert logged == [
        ("race_detected", None, True),
        ("race_handled", "caller_stopped", None),
    ]


def test_a_tool_can_opt_out_of_waiting() -> None:
    wait = WaitForCaller(tools={"book_table": {"wait_s": 0}})
    _world, outcome = run_scenario(GAP, resilient_with(wait))
    (detected,) = events(outcome)
    assert detected["tool"] == "book_table" and "held" not in detected
    assert outcome.talked_over_s == pytest.approx(1.4, abs=0.02)


def test_a_tool_option_overrides_the_bound_and_policy() -> None:
    wait = WaitForCaller(
        tools={"book_table": {"wait_s": 1.0, "past_bound": "skip", "max_wait_s": 1.0}}
    )
    _, outcome = run_scenario(LONG_TALKER, resilient_with(wait))
    _, handled = events(outcome)
    assert handled["action"] == "skipped_at_bound"
    assert handled["at_s"] == pytest.approx(5.0, abs=0.01)


def test_speeches_that_start_over_a_silent_caller_are_not_held() -> None:
    for name in ("lost_words/over_protected_say", "control/end_call_farewell_heard"):
        _, outcome = run_scenario(catalog(name), ResilientAgent)
        assert outcome.passed, outcome.reasons
        assert events(outcome) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"wait_s": -1.0}, "wait_s=-1.0 is out of range"),
        ({"wait_s": 31.0}, "wait_s=31.0 is out of range"),
        ({"past_bound": "wait"}, "past_bound='wait' is not a policy"),
        ({"tools": {"end_call": {"wait": 2.0}}}, "tools['end_call'].wait is not an option"),
        ({"tools": {"end_call": {"wait_s": 60.0}}}, "tools['end_call'].wait_s=60.0 is out"),
        ({"tools": {"end_call": {"past_bound": "no"}}}, "past_bound='no' is not a policy"),
    ],
)
def test_options_are_validated_at_construction(options: dict[str, Any], message: str) -> None:
    with pytest.raises(MiddlewareError, match=re.escape(message)):
        WaitForCaller(**options)


def test_a_caller_who_starts_with_the_speech_is_waited_for_too() -> None:
    # the caller starts at the hold message's first frame; the VAD reports it 0.05 s later
    _world, outcome = run_scenario(GAP.with_onset(1, 4.0), ResilientAgent)
    assert outcome.passed, outcome.reasons
    detected, handled = events(outcome)
    assert detected["at_s"] == pytest.approx(4.05, abs=0.01) and detected["held"] is True
    assert handled["action"] == "caller_stopped"
    assert outcome.talked_over_s == pytest.approx(0.05, abs=0.01)
    # a caller reported later than SIMULTANEOUS_START_S talks over the agent: not held
    _, later = run_scenario(GAP.with_onset(1, 4.1), ResilientAgent)
    assert events(later) == []


def test_a_stuck_vad_does_not_hold_the_speech_to_the_bound() -> None:
    # the VAD sticks in "speaking" after the caller stops at 5.4 s; the line is quiet
    world, outcome = run_scenario(catalog("tool_gap/vad_stuck"), ResilientAgent)
    assert outcome.passed, outcome.reasons
    _, handled = events(outcome)
    assert handled["action"] == "line_quiet"
    assert handled["at_s"] == pytest.approx(5.4 + QUIET_LINE_S, abs=0.11)
    assert hold_message(world).runs[0].started_at == pytest.approx(handled["at_s"], abs=0.01)


# shrunk from fuzz/27182-563 (seed 27182, call 563): the VAD dies 0.3 s into the caller's second
# utterance, stuck in "speaking"; the hold message is held until the line has been quiet for
# QUIET_LINE_S and resumes at 7.35 s, the instant the caller starts a third utterance.
DEAD_VAD_CALLER_STARTS_AT_RESUME = Scenario(
    name="fuzz/27182-563-shrunk",
    family="fuzz",
    description="A fuzzed call: agents.protected_handoff_agent(delay_s=0.4).",
    agent=agents.protected_handoff_agent(delay_s=0.4),
    utterances=(
        Utterance(1.0, 3.3, "let me talk to the manager", expect_reply=False),
        Utterance(4.5, 6.31, "summer blanket violin oyster", reply_within=15.27),
        Utterance(7.35, 9.58, "pepper needle lemon river silver", reply_within=12.0),
    ),
    llm=(
        LLMRule(
            text="",
            tool_calls=(ToolCallScript(name="transfer_to_manager", arguments={}),),
            when_user_says="manager",
        ),
    ),
    vad_fault=VADFault(mode="dead", utterance=1, after=0.3),
    reply_bound=12.0,
    duration=25.58,
)


def test_a_caller_who_starts_as_a_quiet_line_releases_the_hold_is_held_again() -> None:
    # no VAD reports the caller's new start (it is stuck), so only the line's level can tell
    _, plain = run_scenario(DEAD_VAD_CALLER_STARTS_AT_RESUME, Agent)
    assert not plain.passed  # plain Agent plays the hold message over the caller from 4.5 s
    _, outcome = run_scenario(DEAD_VAD_CALLER_STARTS_AT_RESUME, ResilientAgent)
    assert outcome.passed, outcome.reasons
    actions = [(e.get("action"), e["at_s"]) for e in events(outcome) if e.get("action")]
    assert actions[0] == ("line_quiet", pytest.approx(7.35, abs=0.01))
    detected = [e for e in events(outcome) if e.get("held") and e["at_s"] > 7.35]
    assert detected and detected[0]["at_s"] <= 7.35 + SIMULTANEOUS_START_S + 0.05
    # held again until the line has been quiet for QUIET_LINE_S after the caller's last word
    assert actions[-1] == ("line_quiet", pytest.approx(9.58 + QUIET_LINE_S, abs=0.11))
    assert outcome.talked_over_s <= 0.1


# The caller talks over the interruptible preamble (4.0 s) from 4.1 s to 7.0 s: livekit pauses it
# at 4.62 s, and the tool's disallow_interruptions() at 4.85 s makes livekit resume it.
RESUME = catalog("tool_gap/protected_on_resume")


def preamble(world: CallWorld) -> Any:
    (segment,) = [s for s in world.audio_out.segments if s.started_at == pytest.approx(4.0)]
    return segment


def test_plain_agent_resumes_the_protected_preamble_over_the_caller() -> None:
    world, outcome = run_scenario(RESUME, Agent)
    (over,) = protected_talk_over(world)
    assert over.on == "resume"
    assert over.began_at == pytest.approx(4.85, abs=0.01)
    # from the resume to the caller's last word at 7.0 s
    assert over.seconds == pytest.approx(2.15, abs=0.02)
    first, resumed = preamble(world).runs
    assert first.ended_at == pytest.approx(4.62, abs=0.01)
    assert resumed.started_at == pytest.approx(4.85, abs=0.01)
    assert not outcome.passed
    assert any("resumed at 4.85s over utterance 2" in reason for reason in outcome.reasons)


def test_a_speech_protected_while_paused_waits_for_the_caller_then_plays_whole() -> None:
    world, outcome = run_scenario(RESUME, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert outcome.talked_over_s == 0.0
    detected, handled = events(outcome)
    assert detected["event"] == "race_detected" and detected["on"] == "resume"
    assert detected["at_s"] == pytest.approx(4.85, abs=0.01)
    assert detected["tool"] == "book_table" and detected["held"] is True
    # the VAD ends the caller's speech 0.55 s after they stop at 7.0 s
    assert handled["action"] == "caller_stopped" and handled["on"] == "resume"
    assert handled["at_s"] == pytest.approx(7.55, abs=0.01)
    assert handled["held_s"] == pytest.approx(2.7, abs=0.01)
    segment = preamble(world)
    # heard before livekit paused it, then the rest once the caller stopped
    first, rest = segment.runs
    assert first.ended_at == pytest.approx(4.62, abs=0.01)
    assert rest.started_at == pytest.approx(7.55, abs=0.01)
    assert segment.played == pytest.approx(len(RESUME.llm[0].text) / 15, abs=0.05)
    assert not segment.interrupted
    # the words said during the hold still reach the LLM, and are answered
    assert outcome.lost_words == 0
    assert outcome.reply_latencies_s[1] is not None


def test_a_caller_who_starts_over_an_already_protected_speech_is_not_waited_for() -> None:
    # the caller starts at 4.4 s: livekit has not paused the preamble when the tool protects it
    world, outcome = run_scenario(RESUME.with_onset(1, 4.4), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert len(preamble(world).runs) == 1
    assert events(outcome) == []


def test_the_resume_is_held_without_tool_guard_in_the_chain() -> None:
    class OnlyWaiting(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, middleware=[WaitForCaller()], **kwargs)

    _world, outcome = run_scenario(RESUME, OnlyWaiting)
    detected, handled = events(outcome)
    assert detected["on"] == "resume" and detected["held"] is True
    assert handled["action"] == "caller_stopped"
    assert outcome.talked_over_s == 0.0


def test_on_resume_an_output_that_cannot_pause_is_reported_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the sink is swapped for one without pause capability (an AudioOutput chain can replace
    # its leaf) after livekit paused the preamble, right before the tool protects it
    pausable = [True]
    monkeypatch.setattr(PlayoutAudioOutput, "can_pause", property(lambda _self: pausable[0]))

    def losing_pause(base: type[Agent]) -> Agent:
        class LosingPause(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=agents.INSTRUCTIONS)

            @function_tool
            async def book_table(self, ctx: RunContext[None], time: str) -> str:
                """Book a table.

                Args:
                    time: When the table is wanted.
                """
                await asyncio.sleep(1.0)
                pausable[0] = False
                ctx.disallow_interruptions()
                await asyncio.sleep(2.0)
                return f"Table booked for {time}."

        return LosingPause()

    scenario = dataclasses.replace(RESUME, agent=losing_pause)
    with capture_logs() as logs:
        world, outcome = run_scenario(scenario, ResilientAgent)
    (detected,) = events(outcome)
    assert detected["on"] == "resume"
    assert detected["held"] is False and detected["why"] == "output_cannot_pause"
    (over,) = protected_talk_over(world)
    assert over.on == "resume" and over.seconds == pytest.approx(2.15, abs=0.02)
    warnings = [r for r in logs if r["event"] == "protected_speech_not_held"]
    assert len(warnings) == 1
    # the turn keeper still delivers the words said over it
    assert outcome.lost_words == 0
