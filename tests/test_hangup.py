"""Conditional shutdown: veto, waiting for the farewell, the bound, idempotency, end-call tool."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from livekit.agents import Agent
from resilient_agent.middleware.hangup import ConditionalHangup

from resilient_agent import (
    ConversationState,
    Middleware,
    MiddlewareContext,
    MiddlewareError,
    ResilientAgent,
    ShutdownDecision,
    ShutdownRequest,
    end_call_tool,
)
from resilient_agent._engine.chain import MiddlewareChain
from resilient_agent._livekit.shutdown import ShutdownGate
from resilient_agent._session.chain_run import ChainRun
from resilient_agent.lab.catalog import agents, scenarios
from resilient_agent.testing import (
    LLMRule,
    Scenario,
    ToolCallScript,
    Utterance,
    run_scenario,
    run_virtual,
)

FAREWELL = "Thank you for calling. Goodbye!"
GOODBYE = Utterance(1.0, 2.2, "okay goodbye", expect_reply=False)
BYE_RULE = LLMRule(when_user_says="goodbye", tool_calls=(ToolCallScript("end_call"),))


def catalog(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


def decisions(outcome: Any) -> list[str]:
    return [e["action"] for e in outcome.race_events if e["kind"] == "shutdown_request"]


@pytest.mark.parametrize(
    "name",
    [
        "shutdown_finally/interrupted_farewell_job",
        "shutdown_finally/interrupted_farewell_session",
        "end_call/question_during_sleep_interruptible",
        "end_call/question_during_sleep_protected",
    ],
)
def test_the_call_is_kept_when_the_caller_spoke(name: str) -> None:
    _, plain = run_scenario(catalog(name), Agent)
    assert plain.hung_up
    _, outcome = run_scenario(catalog(name), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert not outcome.hung_up
    assert decisions(outcome) == ["kept_call"]


def test_an_uninterrupted_farewell_still_ends_the_call() -> None:
    world, outcome = run_scenario(catalog("control/end_call_farewell_heard"), ResilientAgent)
    assert outcome.passed and outcome.hung_up
    assert decisions(outcome) == ["hung_up"]
    farewell_end = max(s.ended_at or 0 for s in world.audio_out.segments)
    hung_up_at = world.job.hung_up_at
    assert hung_up_at is not None
    # the app's own sleep sets the pace here; the decision adds only the tail pad
    assert hung_up_at - farewell_end <= len(agents.FAREWELL) / 15 + 1.5 + 0.3 + 0.5


def test_aclose_inside_a_tool_no_longer_deadlocks() -> None:
    _, plain = run_scenario(catalog("deadlock/aclose_inside_tool"), Agent)
    assert any("could not be closed" in r for r in plain.reasons)
    _, outcome = run_scenario(catalog("deadlock/aclose_inside_tool"), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert outcome.hung_up


def _tool_agent(**tool_options: Any) -> Any:
    def build(base: type[Agent]) -> Agent:
        return base(instructions="x", tools=[end_call_tool(farewell=FAREWELL, **tool_options)])

    return build


def _end_call_scenario(*utterances: Utterance, **tool_options: Any) -> Scenario:
    return Scenario(
        name="t/end_call_tool",
        family="t",
        description="",
        agent=_tool_agent(**tool_options),
        utterances=(GOODBYE, *utterances),
        llm=(BYE_RULE,),
        farewell=FAREWELL,
        duration=14.0,
    )


def test_end_call_tool_hangs_up_within_the_tail_pad_after_the_farewell() -> None:
    world, outcome = run_scenario(_end_call_scenario(), ResilientAgent)
    assert outcome.passed, outcome.reasons
    farewell = next(s for s in world.audio_out.segments if s.sentences)
    (hang_up,) = [e for e in outcome.race_events if e["action"] == "hung_up"]
    assert farewell.ended_at is not None and world.closed_by_app
    assert 0.29 <= hang_up["at_s"] - farewell.ended_at <= 0.3 + 0.5


def test_end_call_tool_keeps_the_call_when_the_caller_interrupts() -> None:
    question = Utterance(4.0, 5.6, "wait one more question please")
    world, outcome = run_scenario(_end_call_scenario(question), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert not outcome.hung_up and not world.closed_by_app


def test_end_call_tool_can_refuse_a_hang_up_nobody_asked_for() -> None:
    def build(base: type[Agent]) -> Agent:
        class Eager(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(
                    instructions="x",
                    tools=[end_call_tool(farewell=FAREWELL, require_caller_request=True)],
                )

            async def on_enter(self) -> None:
                self.session.generate_reply(instructions="wrap up")

        return Eager()

    scenario = Scenario(
        name="t/eager",
        family="t",
        description="",
        agent=build,
        utterances=(),
        llm=(LLMRule(tool_calls=(ToolCallScript("end_call"),)),),
        duration=8.0,
    )
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert not outcome.hung_up
    outputs = [i for i in world.session.history.items if i.type == "function_call_output"]
    assert outputs and "did not ask to end the call" in outputs[0].output


def test_end_call_tool_rejects_an_empty_farewell() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        end_call_tool(farewell=" ")


def test_tail_pad_is_validated() -> None:
    with pytest.raises(MiddlewareError, match=r"tail_pad_s=-1 is out of range"):
        ConditionalHangup(tail_pad_s=-1)


class _Handle:
    """A speech that never finishes."""

    interrupted = False

    def done(self) -> bool:
        return False

    def add_done_callback(self, callback: Any) -> None:
        pass


class _Session:
    current_speech = None

    def shutdown(self) -> None: ...

    async def aclose(self) -> None: ...


def _gate(*middleware: Middleware, bound_s: float = 2.0) -> tuple[ShutdownGate, list[Any]]:
    emitted: list[Any] = []
    ctx = MiddlewareContext(
        session=_Session(),  # type: ignore[arg-type]
        agent=None,  # type: ignore[arg-type]
        state=ConversationState(),
        emit=emitted.append,
    )
    run = ChainRun(
        MiddlewareChain(list(middleware)),
        ctx,
        farewell_of=lambda _t: None,
        speech_done_at=lambda _id: None,
    )
    return ShutdownGate(run, lambda _t: None, bound_s=bound_s), emitted


def test_a_farewell_that_never_finishes_is_waited_for_only_up_to_the_bound() -> None:
    class WaitForever(Middleware):
        def decide_shutdown(
            self, ctx: MiddlewareContext, request: ShutdownRequest
        ) -> ShutdownDecision | None:
            return ShutdownDecision.wait(_Handle(), "farewell playing")  # type: ignore[arg-type]

    gate, _ = _gate(WaitForever(), bound_s=2.0)
    hung_up_at: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert gate.request("session.shutdown", lambda: hung_up_at.append(loop.time()))
        await asyncio.sleep(5)

    run_virtual(main())
    assert hung_up_at == [pytest.approx(2.0, abs=0.01)]
    assert gate.decisions[0][1].reason == "waited for the farewell too long"


def test_a_second_request_while_one_is_pending_is_ignored() -> None:
    class Slow(Middleware):
        def decide_shutdown(
            self, ctx: MiddlewareContext, request: ShutdownRequest
        ) -> ShutdownDecision | None:
            return ShutdownDecision.now("bye", tail_pad_s=1.0)

    gate, _ = _gate(Slow())
    calls: list[str] = []

    async def main() -> None:
        assert gate.request("end_call", lambda: calls.append("first"))
        assert not gate.request("session.shutdown", lambda: calls.append("second"))
        await asyncio.sleep(2)

    run_virtual(main())
    assert calls == ["first"]


def test_any_middleware_can_veto() -> None:
    class Compliance(Middleware):
        position = "first"

        def decide_shutdown(
            self, ctx: MiddlewareContext, request: ShutdownRequest
        ) -> ShutdownDecision | None:
            return ShutdownDecision.veto("recording disclosure not given yet")

    gate, emitted = _gate(Compliance(), ConditionalHangup())
    calls: list[str] = []

    async def main() -> None:
        gate.request("job.shutdown", lambda: calls.append("hung up"))
        await asyncio.sleep(1)

    run_virtual(main())
    assert calls == []
    assert emitted[0].action == "kept_call"
    assert emitted[0].details["reason"] == "recording disclosure not given yet"


def test_a_tool_that_sleeps_after_its_farewell_gets_one_warning_with_the_fix() -> None:
    from structlog.testing import capture_logs

    import resilient_agent._livekit.shutdown as shutdown_module

    shutdown_module._warned_about_sleeping = False
    with capture_logs() as logs:
        run_scenario(catalog("control/end_call_farewell_heard"), ResilientAgent)
        run_scenario(catalog("control/end_call_farewell_heard"), ResilientAgent)
    warnings = [e for e in logs if e.get("event") == "hang_up_after_sleep"]
    assert len(warnings) == 1
    assert warnings[0]["tool"] == "end_call" and warnings[0]["waited_s"] > 1.0
    assert "end_call_tool()" in warnings[0]["fix"]
