"""Drop-in fidelity (#15): a race-free call on ResilientAgent is the same call as on Agent.

Every race-free call is run on a plain ``livekit.agents.Agent`` and on ``ResilientAgent`` with
the default middleware, and the whole observable trace must be identical (see
:mod:`resilient_agent.testing.differential`): the lab's control scenarios, a few hundred seeded
race-free calls, and livekit-style lines (frames of zeros, a quiet line, an STT without interims).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
from livekit.agents import Agent
from resilient_agent.middleware import default_middleware
from resilient_agent.middleware.hangup import ConditionalHangup

from resilient_agent import Middleware, MiddlewareContext, ResilientAgent
from resilient_agent.lab.catalog import agents, scenarios
from resilient_agent.testing import LLMRule, NoiseWindow, Scenario, ToolCallScript, Utterance
from resilient_agent.testing.differential import (
    CallTrace,
    compare_traces,
    race_free_call,
    run_differential,
    tool_agent,
)

# calls whose livekit logs are compared: no earlier test's garbage logs into them
pytestmark = pytest.mark.usefixtures("earlier_tests_garbage_collected")

# The app's audio input object, checked on its own below (#15 item 3).
_SEPARATE = ("input_audio_kept",)
# Enough seeds to cover lengths x gaps x lines x interims x transcription_timeout (plus a third as
# many with tools), within about a minute of CI; set the variable for a longer soak.
_CALLS = int(os.environ.get("RESILIENT_DIFFERENTIAL_CALLS", "120"))


def _without(trace: CallTrace, categories: tuple[str, ...]) -> CallTrace:
    return {k: v for k, v in trace.items() if k not in categories}


def _differences(scenario: Scenario, candidate: type[Agent] = ResilientAgent) -> list[str]:
    result = run_differential(scenario, Agent, candidate)
    return compare_traces(_without(result.expected, _SEPARATE), _without(result.actual, _SEPARATE))


class NoTailPadAgent(ResilientAgent):
    """ResilientAgent with its one intended end-call divergence (the hang-up's tail pad) off."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        chain = [
            ConditionalHangup(tail_pad_s=0) if isinstance(m, ConditionalHangup) else m
            for m in default_middleware()
        ]
        super().__init__(*args, middleware=chain, **kwargs)


_CONTROLS = [s for s in scenarios() if s.control]


# Race-free in the scripted lab, where the chain still acts, as docs/drop-in.md says: each
# difference allowed, as the start of its line; any other difference fails.
_INTENDED: dict[str, tuple[str, ...]] = {
    # the app asked livekit for a protected greeting, which a realtime model's server turn
    # detection drops (with a warning): the library protects the handle instead
    **{
        f"control/realtime_{flavour}_app_protected_greeting": (
            "livekit_logs[0]: expected (0.0, 30, 'the RealtimeModel uses a server-side turn "
            "detection, allow_interruptions cannot be False",
            "playouts[0]: expected (0.3, 'speech#0', True), got (0.3, 'speech#0', False)",
            "speeches[0]: expected ('speech#0', 0.0, 'generate_reply', True, 0.0, None, 5.5, "
            "False, True), got ('speech#0', 0.0, 'generate_reply', True, 0.0, None, 5.5, False, "
            "False)",
        )
        for flavour in ("openai", "gemini")
    },
    # the caller's question during the tool is answered by the reply livekit started for it;
    # a provider's format puts the tool's output before it, so the tool reply would answer it
    # again: ContextIntegrity leaves it out of the tool reply (a scripted LLM reads in time
    # order and would not have answered twice)
    "control/question_as_a_long_tool_ends": (
        "interventions[0]: expected (nothing), got (17.75, 'race_detected', 'tool_reply_reanswers'",
        "llm_requests[2]: expected (17.530004, ('please book a table for eight', 'what time do "
        "you close tonight'), 'book_table', 'Your table is booked.', (), False), got (17.750004, "
        "('please book a table for eight',), 'book_table'",
    ),
}


@pytest.mark.parametrize("scenario", _CONTROLS, ids=[s.name for s in _CONTROLS])
def test_every_control_scenario_is_identical(scenario: Scenario) -> None:
    # a hang-up waits ConditionalHangup's tail pad after the farewell: the documented
    # divergence, turned off by its option, and the rest must be identical
    candidate = NoTailPadAgent if scenario.farewell is not None else ResilientAgent
    differences = _differences(scenario, candidate)
    allowed = _INTENDED.get(scenario.name, ())
    assert len(differences) == len(allowed), differences
    for difference, start in zip(differences, allowed, strict=True):
        assert difference.startswith(start), (difference, start)


def test_the_intended_divergences_are_controls_of_the_catalog() -> None:
    assert set(_INTENDED) <= {s.name for s in _CONTROLS}


def test_control_scenarios_cover_the_lab() -> None:
    assert len(_CONTROLS) >= 7


@pytest.mark.parametrize(
    ("line", "interims"),
    [("marked", False), ("quiet", True), ("quiet", False), ("zeros", True), ("zeros", False)],
)
def test_a_long_turn_on_livekit_style_lines_is_identical(line: str, interims: bool) -> None:
    """A caller talking 6 s without a pause, on each line livekit's own tests use."""
    scenario = Scenario(
        name=f"race_free/long_turn_{line}_{'interims' if interims else 'finals'}",
        family="race_free",
        description="One long healthy turn.",
        agent=agents.plain_agent,
        utterances=(Utterance(1.0, 7.0, "so we would like a quiet corner table near the garden"),),
        duration=13.0,
        caller_line=line,  # type: ignore[arg-type]
        stt_interims=interims,
        control=True,
    )
    assert _differences(scenario) == []


@pytest.mark.parametrize("timeout", [None, 1.0])
def test_speech_without_a_transcript_is_left_to_livekit(timeout: float | None) -> None:
    """A low hum the VAD takes for speech and the STT hears no words in (a quiet line).

    With ``transcription_timeout`` set, livekit's own ``user_transcription_timeout`` must fire,
    exactly as on Agent.
    """
    options = {} if timeout is None else {"transcription_timeout": timeout}
    scenario = Scenario(
        name="race_free/hum_without_words",
        family="race_free",
        description="Three seconds of a low hum, then a question.",
        agent=agents.plain_agent,
        utterances=(Utterance(6.0, 7.2, "is the terrace open"),),
        noise=(NoiseWindow(1.0, 4.0, rms=180.0),),
        duration=12.0,
        session_options=options,
        control=True,
    )
    result = run_differential(scenario, Agent, ResilientAgent)
    events = [kind for _, kind, _ in result.expected["session_events"]]
    assert ("user_transcription_timeout" in events) == (timeout is not None)
    assert (
        compare_traces(_without(result.expected, _SEPARATE), _without(result.actual, _SEPARATE))
        == []
    )


def test_seeded_race_free_calls_without_tools_are_identical() -> None:
    found = {}
    for seed in range(_CALLS):
        scenario = race_free_call(seed, tools=False)
        differences = _differences(scenario)
        if differences:
            found[scenario.name] = (scenario.caller_line, scenario.stt_interims, differences)
    assert found == {}


def test_seeded_race_free_calls_with_tools_are_identical() -> None:
    found = {}
    for seed in range(_CALLS // 3):
        scenario = race_free_call(10_000 + seed)
        differences = _differences(scenario)
        if differences:
            found[scenario.name] = differences
    assert found == {}


def test_a_tool_that_raises_gives_the_llm_what_agent_gives_it() -> None:
    scenario = Scenario(
        name="race_free/tool_raises",
        family="race_free",
        description="The payment tool raises a plain exception.",
        agent=tool_agent(work_seconds=0.3, fails=True),
        utterances=(Utterance(1.0, 2.2, "please charge ten"),),
        llm=(
            LLMRule(
                when_user_says="charge",
                tool_calls=(ToolCallScript("charge_card", {"amount": "ten"}),),
            ),
            LLMRule(text="That did not work.", after_tool="charge_card"),
        ),
        duration=8.0,
        control=True,
    )
    result = run_differential(scenario, Agent, ResilientAgent)
    assert result.expected["tool_outputs"][0][2:] == ("An internal error occurred", True)
    assert result.actual["tool_outputs"] == result.expected["tool_outputs"]
    assert result.actual["livekit_logs"] == result.expected["livekit_logs"]


def test_session_input_audio_stays_the_apps_object() -> None:
    """While the middleware observe the caller's audio, the session's input is the app's."""
    scenario = dataclasses.replace(_CONTROLS[-1])
    result = run_differential(scenario, Agent, ResilientAgent)
    assert result.expected["input_audio_kept"]
    assert all(kept for _, kept in result.expected["input_audio_kept"])
    assert result.actual["input_audio_kept"] == result.expected["input_audio_kept"]


class _FailsToSetUp(Middleware):
    """A piece that fails while the agent enters (a plugin's setup hitting a dead service)."""

    name = "FailsToSetUp"

    async def setup(self, ctx: MiddlewareContext) -> None:
        raise RuntimeError("the service this middleware needs is down")

    async def on_agent_state(self, ctx: MiddlewareContext, ev: Any) -> None:
        """Never reached: its setup failed."""


class WithAFailingPiece(ResilientAgent):
    """The default chain plus a piece whose setup fails."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, middleware=[*default_middleware(), _FailsToSetUp()], **kwargs)


def test_a_piece_failing_while_entering_costs_that_piece_only() -> None:
    """The app's on_enter still runs and the call is the same call (#15 item 5)."""
    scenario = Scenario(
        name="race_free/greeting_with_a_failing_piece",
        family="race_free",
        description="The app greets from on_enter; one middleware fails to set up.",
        agent=agents.greeting_agent(protected=False, text="Hello, how can I help?"),
        utterances=(Utterance(4.0, 5.0, "hello there"),),
        duration=9.0,
        control=True,
    )
    result = run_differential(scenario, Agent, WithAFailingPiece)
    assert result.expected["heard"], "the greeting plays on Agent"
    assert (
        compare_traces(_without(result.expected, _SEPARATE), _without(result.actual, _SEPARATE))
        == []
    )


def test_the_harness_sees_a_divergence() -> None:
    """A candidate that changes one thing the caller hears is caught."""

    class SlowerAgent(Agent):
        async def on_enter(self) -> None:
            self.session.say("Welcome.")

    scenario = dataclasses.replace(_CONTROLS[-1])
    result = run_differential(scenario, Agent, SlowerAgent)
    assert any(d.startswith("heard") for d in result.differences)
