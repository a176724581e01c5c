"""ToolGuard: user turns never wait for a running tool; protection never fails a tool."""

from __future__ import annotations

import asyncio
from typing import Any

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
    run_virtual,
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
    # the caller's interruption released the call at once (ToolGuard's placeholder), and the
    # tool's own result came after, as livekit's deferred tool reply
    resilient = outputs(ResilientAgent)
    assert [error for error, _ in resilient] == [False, False]
    assert "still running" in resilient[0][1] and resilient[1][1] == "Three tables left."


def _policy_agent(policies: dict[str, Any], timeouts: dict[str, float] | None = None) -> Any:
    """ResilientAgent whose chain is the default one with these ToolGuard options."""
    from resilient_agent.middleware import default_middleware
    from resilient_agent.middleware.tool_guard import ToolGuard

    class Configured(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            chain = [mw for mw in default_middleware() if not isinstance(mw, ToolGuard)]
            guard = ToolGuard(policies=policies, timeouts=timeouts)
            super().__init__(*args, middleware=[guard, *chain], **kwargs)

    return Configured


RUNS: list[str] = []


def _transfer_agent(base: type[Agent]) -> Agent:
    class Transfer(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions="x")

        @function_tool
        async def transfer_call(self, ctx: RunContext[None]) -> str:
            """Transfer the caller to a manager."""
            RUNS.append("transfer")
            return "Transferred."

    return Transfer()


def test_yield_to_user_does_not_run_a_tool_over_a_speaking_caller() -> None:
    scenario = Scenario(
        name="t/yield",
        family="t",
        description="",
        agent=_transfer_agent,
        utterances=(
            Utterance(1.0, 2.8, "please transfer me", expect_reply=False),
            Utterance(3.5, 5.0, "actually wait one moment", expect_reply=False),
        ),
        llm=(LLMRule(when_user_says="transfer", tool_calls=(ToolCallScript("transfer_call"),)),),
        duration=10.0,
    )
    RUNS.clear()
    run_scenario(scenario, Agent)
    assert RUNS == ["transfer"]  # livekit runs it while the caller is still talking
    RUNS.clear()
    world, outcome = run_scenario(scenario, _policy_agent({"transfer_call": "yield_to_user"}))
    assert RUNS == []
    assert ("tool_over_speaking_caller", "yielded_to_caller") in [
        (e["kind"], e["action"]) for e in outcome.race_events
    ]
    later = [r for r in world.llm.requests if "actually wait one moment" in " ".join(r.user_texts)]
    assert later, "the caller's next words reached the LLM with the yielded request"


def _hold_agent(*, protected_by_app: bool) -> Any:
    def build(base: type[Agent]) -> Agent:
        class Hold(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="x")

            @function_tool
            async def check_stock(self, ctx: RunContext[None]) -> str:
                """Check the stock."""
                if protected_by_app:
                    ctx.disallow_interruptions()
                await ctx.session.say(
                    "Please hold while I look through the reservation book for tonight.",
                    allow_interruptions=not protected_by_app,
                )
                return "Three tables left."

        return Hold()

    return build


def _hold_scenario(protected_by_app: bool) -> Scenario:
    return Scenario(
        name="t/hold",
        family="t",
        description="",
        agent=_hold_agent(protected_by_app=protected_by_app),
        utterances=(
            Utterance(1.0, 2.5, "any tables left", expect_reply=False),
            Utterance(4.5, 6.0, "hello are you there", expect_reply=False),
        ),
        llm=(LLMRule(when_user_says="tables", tool_calls=(ToolCallScript("check_stock"),)),),
        duration=14.0,
    )


def _hold_interrupted(world: Any) -> bool:
    (hold,) = [s for s in world.recorder.speeches.values() if s.source == "say"]
    return bool(hold.interrupted)


def test_protect_policy_keeps_the_tools_speech_uninterrupted() -> None:
    scenario = _hold_scenario(protected_by_app=False)
    plain_world, _ = run_scenario(scenario, ResilientAgent)
    assert _hold_interrupted(plain_world)
    world, _ = run_scenario(scenario, _policy_agent({"check_stock": "protect"}))
    assert not _hold_interrupted(world)


def test_allow_policy_overrides_the_tools_own_protection() -> None:
    scenario = _hold_scenario(protected_by_app=True)
    plain_world, _ = run_scenario(scenario, ResilientAgent)
    assert not _hold_interrupted(plain_world)
    world, _ = run_scenario(scenario, _policy_agent({"check_stock": "allow"}))
    assert _hold_interrupted(world)


def test_a_tool_past_its_timeout_is_cancelled_cleanly() -> None:
    cleaned_up: list[bool] = []

    def build(base: type[Agent]) -> Agent:
        class Slow(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="x")

            @function_tool
            async def slow_lookup(self, ctx: RunContext[None]) -> str:
                """Look something up slowly."""
                try:
                    await asyncio.sleep(30)
                finally:
                    cleaned_up.append(True)
                return "never"

        return Slow()

    scenario = Scenario(
        name="t/timeout",
        family="t",
        description="",
        agent=build,
        utterances=(Utterance(1.0, 2.5, "look it up", expect_reply=False),),
        llm=(LLMRule(when_user_says="look", tool_calls=(ToolCallScript("slow_lookup"),)),),
        duration=10.0,
    )
    world, _ = run_scenario(scenario, _policy_agent({}, timeouts={"slow_lookup": 2.0}))
    outputs = [i for i in world.session.history.items if i.type == "function_call_output"]
    assert len(outputs) == 1 and outputs[0].is_error
    assert "took longer than 2 s" in outputs[0].output
    assert cleaned_up == [True]


def test_policies_and_timeouts_are_validated() -> None:
    import pytest
    from resilient_agent.middleware.tool_guard import ToolGuard

    from resilient_agent import MiddlewareError

    with pytest.raises(MiddlewareError, match=r"policies\['x'\]='block' is not a policy"):
        ToolGuard(policies={"x": "block"})  # type: ignore[dict-item]
    with pytest.raises(MiddlewareError, match=r"timeouts\['x'\]=0 is out of range"):
        ToolGuard(timeouts={"x": 0})


def test_a_cancellable_tool_is_cancelled_when_the_caller_interrupts_it() -> None:
    scenario = catalog("tool_gap/cancellable_tool_interrupted")
    plain_world, plain = run_scenario(scenario, Agent)
    assert any("utterance 2" in r and "answered after" in r for r in plain.reasons)
    assert plain_world.agent.tool_finished is True  # the plain tool ran on under the answer
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert outcome.reply_latencies_s[1] is not None and outcome.reply_latencies_s[1] <= 1.5 * 1.2
    assert world.agent.tool_finished is False
    (cancelled,) = [e for e in outcome.race_events if e["kind"] == "tool_interrupted_by_caller"]
    assert cancelled["action"] == "cancelled" and cancelled["tool"] == "check_availability"
    outputs = [i for i in world.session.history.items if i.type == "function_call_output"]
    assert len(outputs) == 1 and outputs[0].is_error and "caller spoke" in outputs[0].output
    assert not any(s.text == "We have tables free at eight." for s in heard_sentences(world))


def test_guard_policy_on_a_cancellable_tool_keeps_its_result_instead() -> None:
    scenario = catalog("tool_gap/cancellable_tool_interrupted")
    world, outcome = run_scenario(scenario, _policy_agent({"check_availability": "guard"}))
    assert outcome.passed, outcome.reasons
    assert world.agent.tool_finished is True
    spoken = [s for s in heard_sentences(world) if s.text == "We have tables free at eight."]
    assert [s.complete for s in spoken] == [True]


def test_a_cancel_policy_tool_cancelled_by_livekit_stops_its_body() -> None:
    from types import SimpleNamespace

    from livekit.agents.voice.speech_handle import SpeechHandle
    from resilient_agent.middleware.tool_guard import ToolGuard

    from resilient_agent import ConversationState, MiddlewareContext, ToolCall

    async def main() -> list[str]:
        seen: list[str] = []

        async def body(_call: ToolCall) -> str:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen.append("body cancelled")
                raise
            return "never"

        run_context = SimpleNamespace(speech_handle=SpeechHandle.create())
        call = ToolCall(
            "check_availability",
            run_context=run_context,  # type: ignore[arg-type]
            cancellable=True,
        )
        ctx = MiddlewareContext(
            session=None,  # type: ignore[arg-type]
            agent=None,  # type: ignore[arg-type]
            state=ConversationState(),
            emit=lambda _ev: None,
        )
        outer = asyncio.ensure_future(ToolGuard().wrap_tool_call(ctx, call, body))
        await asyncio.sleep(1.0)
        outer.cancel()  # what livekit's cancel_task does to the call
        try:
            await outer
        except asyncio.CancelledError:
            seen.append("call cancelled")
        return seen

    assert sorted(run_virtual(main())) == ["body cancelled", "call cancelled"]
