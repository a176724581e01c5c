"""ToolGuard: user turns never wait for a running tool; protection never fails a tool."""

from __future__ import annotations

import asyncio

from livekit.agents import Agent, RunContext, function_tool

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import scenarios
from resilient_agent.testing import (
    LLMRule,
    Scenario,
    ToolCallScript,
    Utterance,
    heard_sentences,
    run_scenario,
)


def catalog(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


def test_a_user_turn_does_not_wait_for_a_long_tool_and_the_result_is_spoken_once() -> None:
    scenario = catalog("tool_gap/business_logic_long")
    _, plain = run_scenario(scenario, Agent)
    assert plain.interruption_timeouts == 1
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert outcome.interruption_timeouts == 0
    # the caller's question (6.5-7.8 s) is answered while the 9 s booking still runs
    assert outcome.reply_latencies_s[1] is not None and outcome.reply_latencies_s[1] < 3.0
    booked = [s for s in heard_sentences(world) if s.text == "Your table is booked."]
    assert len(booked) == 1 and booked[0].complete


def test_a_plain_slow_tool_keeps_its_result() -> None:
    scenario = catalog("tool_gap/business_logic_plain")
    plain_world, _ = run_scenario(scenario, Agent)
    assert not any(s.text == "Your table is booked." for s in heard_sentences(plain_world))
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert [s.complete for s in heard_sentences(world) if s.text == "Your table is booked."] == [
        True
    ]


def _late_protection_agent(base: type[Agent]) -> Agent:
    class LateProtection(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions="x")

        @function_tool
        async def check_stock(self, ctx: RunContext[None]) -> str:
            """Check the stock."""
            await asyncio.sleep(2.0)
            ctx.disallow_interruptions()  # too late: the caller already interrupted
            await asyncio.sleep(0.5)
            return "Three tables left."

    return LateProtection()


def test_disallow_interruptions_after_the_caller_interrupted_does_not_fail_the_tool() -> None:
    scenario = Scenario(
        name="t/late_protection",
        family="t",
        description="",
        agent=_late_protection_agent,
        utterances=(
            Utterance(1.0, 2.5, "any tables left", expect_reply=False),
            Utterance(4.0, 5.0, "actually never mind", expect_reply=False),
        ),
        llm=(
            LLMRule(
                text="Let me check how many tables are still available tonight.",
                when_user_says="tables",
                tool_calls=(ToolCallScript("check_stock"),),
            ),
        ),
        duration=12.0,
    )

    def outputs(agent_class: type[Agent]) -> list[tuple[bool, str]]:
        world, _ = run_scenario(scenario, agent_class)
        return [
            (i.is_error, i.output)
            for i in world.session.history.items
            if i.type == "function_call_output"
        ]

    assert outputs(Agent) == [(True, "An internal error occurred")]
    assert outputs(ResilientAgent) == [(False, "Three tables left.")]
