"""The races on a realtime model: reproduced on a plain Agent, handled by ResilientAgent."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent, end_call_tool
from resilient_agent.lab.catalog.realtime import realtime_controls, realtime_scenarios
from resilient_agent.lab.cli import main
from resilient_agent.testing import (
    LLMRule,
    Scenario,
    ToolCallScript,
    Utterance,
    heard_sentences,
    run_scenario,
)
from resilient_agent.testing.realtime import ScriptedRealtimeModel

FLAVOURS = ("realtime_openai", "realtime_gemini")
FAREWELL = "Thank you for calling. Goodbye!"


def _model(world: Any) -> ScriptedRealtimeModel:
    assert isinstance(world.llm, ScriptedRealtimeModel)
    return world.llm


@pytest.mark.parametrize("scenario", realtime_scenarios(), ids=lambda s: s.name)
def test_each_realtime_race_reproduces_on_agent_and_is_handled(scenario: Scenario) -> None:
    _, on_agent = run_scenario(scenario, Agent)
    assert not on_agent.passed, "the race does not reproduce on a plain Agent"
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    # every word the caller said reached the model, once per session: words a leaving agent's
    # session heard but never answered are heard again by the next agent's own session
    said = " ".join(u.text for u in scenario.utterances)
    turns = _model(world).turns
    handed_on = {
        i
        for i in range(1, len(turns))
        if turns[i].text == turns[i - 1].text and turns[i].session != turns[i - 1].session
    }
    heard = " ".join(turn.text for i, turn in enumerate(turns) if i not in handed_on)
    assert heard == said


@pytest.mark.parametrize("scenario", realtime_controls(), ids=lambda s: s.name)
def test_realtime_controls_pass_on_both_agents(scenario: Scenario) -> None:
    for agent_class in (Agent, ResilientAgent):
        _, outcome = run_scenario(scenario, agent_class)
        assert outcome.passed, (agent_class.__name__, outcome.reasons)


@pytest.mark.parametrize("kind", FLAVOURS)
def test_words_over_a_protected_line_are_held_then_sent(kind: str) -> None:
    (scenario,) = [
        s
        for s in realtime_scenarios()
        if s.name == f"realtime/{kind.removeprefix('realtime_')}/words_over_protected_greeting"
    ]
    world, _ = run_scenario(scenario, ResilientAgent)
    greeting = _model(world).responses[0]
    # the greeting was not cut: the model heard nothing while it played
    assert greeting.interrupted_at is None and not greeting.cancelled
    assert all(s.complete for s in heard_sentences(world))
    races = [(r["kind"], r["action"]) for r in world.race_events]
    assert races == [
        ("caller_audio_withheld_from_model", None),
        ("caller_audio_withheld_from_model", "sent_to_model"),
    ]
    (sent,) = [r for r in world.race_events if r["action"] == "sent_to_model"]
    # the caller's 2 s, and the rest of the hold, went to the model when the greeting ended
    assert sent["sent_s"] == pytest.approx(sent["held_s"], abs=0.02)
    (turn,) = _model(world).turns
    greeting_end = 0.3 + len(greeting.text) / 15
    assert turn.committed_at - world.t0 > greeting_end


def _end_call_app(base: type[Agent]) -> Agent:
    return base(instructions="You help callers.", tools=[end_call_tool(farewell=FAREWELL)])


def _goodbye_call(kind: str, *utterances: Utterance) -> Scenario:
    return Scenario(
        name="realtime/end_call_tool",
        family="realtime",
        description="the library's end_call_tool on a realtime model without TTS",
        agent=_end_call_app,
        utterances=(Utterance(1.0, 2.2, "okay goodbye", expect_reply=False), *utterances),
        llm=(
            LLMRule(when_user_says="goodbye", tool_calls=(ToolCallScript("end_call"),)),
            LLMRule(when_user_says="refund", text="A refund takes five working days."),
        ),
        farewell=FAREWELL,
        session_options={"session_close_transcript_timeout": 0.5},
        model=kind,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("kind", FLAVOURS)
def test_end_call_tool_hangs_up_after_a_heard_goodbye_without_a_tts(kind: str) -> None:
    world, outcome = run_scenario(_goodbye_call(kind), ResilientAgent)
    assert outcome.passed, outcome.reasons
    sentences = heard_sentences(world)
    assert any(s.text == FAREWELL and s.complete for s in sentences)
    assert world.job.hung_up_at is not None and world.job.room_deletions
    # the model was told to say it, word for word, and to call no tool (Gemini also answers
    # the tool's result on its own: that reply is cut by the hang-up)
    (farewell,) = [r for r in _model(world).responses if r.text == FAREWELL]
    assert farewell.tool_calls == () and farewell.user_initiated
    assert world.logs.count("without a TTS model") == 0


@pytest.mark.parametrize("kind", FLAVOURS)
def test_a_question_over_the_goodbye_keeps_the_call(kind: str) -> None:
    question = Utterance(3.8, 5.6, "wait actually how long does a refund take")
    world, outcome = run_scenario(_goodbye_call(kind, question), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert world.job.hung_up_at is None
    assert any(s.text.startswith("A refund") and s.complete for s in heard_sentences(world))


DOCUMENTED = "resilient-agent lab --quiet --only 'realtime'"


def test_the_documented_realtime_lab_run(capsys: pytest.CaptureFixture[str]) -> None:
    program, *arguments = shlex.split(DOCUMENTED)
    assert program == "resilient-agent"
    assert main(arguments) == 0
    rows = {
        line.split()[0]: line.split()[1:]
        for line in capsys.readouterr().out.splitlines()
        if line.startswith(("realtime/", "control/realtime_"))
    }
    for scenario in [*realtime_scenarios(), *realtime_controls()]:
        on_agent, _, on_resilient, *_ = rows[scenario.name]
        assert on_agent == ("pass" if scenario.control else "FAIL"), scenario.name
        assert on_resilient == "pass", scenario.name
