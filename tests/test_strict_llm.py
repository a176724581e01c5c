"""The lab's LLM rejects a malformed context as the real providers do, and the call fails.

OpenAI's Responses API, Gemini and Anthropic refuse a chat context with a function call that has
no output (or an output without its call), and every later turn of the call then fails too
(livekit/agents#5092). The scripted LLM answers such a request with a non-retryable 400, and the
lab's contracts name it, so a merge, a release or a recovery that broke a context would show.
``ResilientAgent``'s ContextIntegrity repairs such a context before the LLM gets it.
"""

from __future__ import annotations

import asyncio

import pytest
from livekit.agents import Agent, APIStatusError
from livekit.agents.llm import ChatContext, ChatMessage, FunctionCall, FunctionCallOutput

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import agents
from resilient_agent.testing import Scenario, Utterance, run_scenario
from resilient_agent.testing.differential import run_differential
from resilient_agent.testing.llm import ScriptedLLM, malformed_context

# calls whose livekit logs are compared: no earlier test's garbage logs into them
pytestmark = pytest.mark.usefixtures("earlier_tests_garbage_collected")


def _context(*, call: bool, output: bool) -> ChatContext:
    ctx = ChatContext.empty()
    ctx.add_message(role="user", content="is the terrace open")
    if call:
        ctx.items.append(FunctionCall(call_id="call_1", name="check_terrace", arguments="{}"))
    if output:
        ctx.items.append(
            FunctionCallOutput(
                call_id="call_1", name="check_terrace", output="open", is_error=False
            )
        )
    return ctx


def test_a_well_formed_context_passes() -> None:
    assert malformed_context(_context(call=True, output=True)) is None
    assert malformed_context(_context(call=False, output=False)) is None


@pytest.mark.parametrize(
    ("call", "output", "why"),
    [(True, False, "without its output"), (False, True, "without its call")],
)
def test_a_malformed_context_is_named(call: bool, output: bool, why: str) -> None:
    assert why in (malformed_context(_context(call=call, output=output)) or "")


def test_the_scripted_llm_rejects_it_with_a_400() -> None:
    async def ask() -> None:
        async with ScriptedLLM().chat(chat_ctx=_context(call=True, output=False)) as stream:
            async for _ in stream:
                pass

    with pytest.raises(APIStatusError) as raised:
        asyncio.run(ask())
    assert raised.value.status_code == 400
    assert not raised.value.retryable


def _breaking_agent(base: type[Agent]) -> Agent:
    """An app that leaves a function call without its output in the turn's context."""

    class BreakingAgent(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=agents.INSTRUCTIONS)

        async def on_user_turn_completed(
            self, turn_ctx: ChatContext, new_message: ChatMessage
        ) -> None:
            turn_ctx.items.append(FunctionCall(call_id="call_x", name="lookup", arguments="{}"))

    return BreakingAgent()


_BROKEN = Scenario(
    name="strict_llm/call_without_output",
    family="strict_llm",
    description="The app's hook leaves a function call without its output in the context.",
    agent=_breaking_agent,
    utterances=(Utterance(1.0, 2.5, "is the terrace open"),),
    duration=8.0,
)


def test_a_call_whose_context_breaks_fails_by_name_on_agent() -> None:
    _, outcome = run_scenario(_BROKEN, Agent)
    assert not outcome.passed
    assert any("malformed context" in reason for reason in outcome.reasons), outcome.reasons


def test_resilient_agent_repairs_the_broken_context_and_reports_it() -> None:
    world, outcome = run_scenario(_BROKEN, ResilientAgent)
    assert not any("malformed context" in reason for reason in outcome.reasons), outcome.reasons
    assert world.llm.requests and all(r.malformed is None for r in world.llm.requests)
    repairs = [
        (r["event"], r["action"], r["calls_without_output"])
        for r in world.race_events
        if r["kind"] == "malformed_context"
    ]
    assert repairs[:2] == [
        ("race_detected", None, ["call_x"]),
        ("race_handled", "repaired", ["call_x"]),
    ]


def test_the_differential_harness_names_a_malformed_context() -> None:
    result = run_differential(_BROKEN, Agent, ResilientAgent)
    assert any(d.startswith("malformed_contexts on Agent") for d in result.differences)
    assert not any(d.startswith("malformed_contexts on ResilientAgent") for d in result.differences)
