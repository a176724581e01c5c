"""ResilientAgent on real AgentSessions: drop-in, tool wrapping, attribution, isolation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lab_calls import LabCalls
from livekit.agents import Agent, RunContext, function_tool
from livekit.agents.llm.utils import build_legacy_openai_schema
from livekit.rtc import EventEmitter

from resilient_agent import (
    Middleware,
    MiddlewareErrorEvent,
    MiddlewareSpec,
    ResilientAgent,
    SpeechInfo,
    ToolCall,
    ToolOutcome,
)
from resilient_agent._engine.chain import MiddlewareChain
from resilient_agent._session.runtime import SessionRuntime
from resilient_agent.lab.catalog import agents, scenarios
from resilient_agent.lab.run import AgentUnderTest
from resilient_agent.testing import LLMRule, Scenario, ToolCallScript, Utterance, run_scenario


class Journal(Middleware):
    """Records what the chain tells it."""

    def __init__(self) -> None:
        self.tool_calls: list[ToolCall] = []
        self.tool_exits: list[ToolOutcome] = []
        self.speeches: list[SpeechInfo] = []
        self.user_states: list[str] = []

    async def on_tool_start(self, ctx: Any, call: ToolCall) -> None:
        self.tool_calls.append(call)

    async def on_tool_exit(self, ctx: Any, call: ToolCall, outcome: ToolOutcome) -> None:
        self.tool_exits.append(outcome)

    async def on_speech_created(self, ctx: Any, speech: SpeechInfo) -> None:
        self.speeches.append(speech)

    async def on_user_state(self, ctx: Any, ev: Any) -> None:
        self.user_states.append(ev.new_state)


def with_middleware(*middleware: Middleware) -> type[Agent]:
    class Configured(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, middleware=list(middleware), **kwargs)

    return Configured


class Tools(ResilientAgent):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(instructions="x", **kwargs)

    @function_tool
    async def lookup(self, ctx: RunContext[None], city: str, days: int = 1) -> str:
        """Look up the weather.

        Args:
            city: The city.
            days: How many days ahead.
        """
        return f"{city}:{days}"


class PlainTools(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="x")

    lookup = Tools.lookup


@function_tool
async def standalone(topic: str) -> str:
    """Say something about a topic.

    Args:
        topic: The topic.
    """
    return topic


def test_drop_in_construction_and_default_chain() -> None:
    agent = ResilientAgent(instructions="be brief", tools=[standalone])
    assert agent.instructions == "be brief"
    assert [mw.display_name for mw in agent.middleware] == [
        "ToolGuard",
        "TurnKeeper",
        "WaitForCaller",
        "RealtimeInputHold",
        "RealtimeReplyWatch",
        "SilentTurnGuard",
        "ConditionalHangup",
        "SttRecovery",
        "LlmFallback",
        "SilentReply",
        "Watchdog",
        "ContextIntegrity",
    ]
    assert {t.id for t in agent.tools} == {"standalone"}


def test_wrapped_tools_keep_their_json_schema() -> None:
    wrapped = {t.id: t for t in Tools(tools=[standalone]).tools}
    plain = {t.id: t for t in PlainTools().tools}
    assert build_legacy_openai_schema(wrapped["lookup"]) == build_legacy_openai_schema(
        plain["lookup"]
    )
    assert build_legacy_openai_schema(wrapped["standalone"]) == build_legacy_openai_schema(
        standalone
    )


def test_wrapped_tool_called_outside_a_session_runs_the_body() -> None:
    tool = next(t for t in Tools(tools=[standalone]).tools if t.id == "standalone")
    assert asyncio.run(tool(topic="pasta")) == "pasta"  # type: ignore[operator]


def test_update_tools_wraps_new_tools() -> None:
    agent = ResilientAgent(instructions="x")

    async def update() -> None:
        await agent.update_tools([standalone])

    asyncio.run(update())
    (tool,) = agent.tools
    assert tool is not standalone and tool.id == "standalone"


def _booking_scenario(name: str = "t/booking") -> Scenario:
    return Scenario(
        name=name,
        family="t",
        description="",
        agent=agents.booking_agent("protected_say", work_seconds=1.0),
        utterances=(Utterance(1.0, 2.8, "please book a table for eight", reply_within=8.0),),
        llm=(
            LLMRule(
                when_user_says="book",
                tool_calls=(ToolCallScript("book_table", {"time": "eight"}),),
            ),
            LLMRule(text="Your table is booked.", after_tool="book_table"),
        ),
        duration=12.0,
    )


def test_tool_calls_run_through_the_chain_with_run_context_injected() -> None:
    journal = Journal()
    world, outcome = run_scenario(_booking_scenario(), with_middleware(journal))
    assert outcome.passed, outcome.reasons
    session_journal = world.agent.middleware[0]
    assert session_journal is journal  # the app's instance is the live one
    (call,) = session_journal.tool_calls
    assert call.name == "book_table" and dict(call.arguments) == {"time": "eight"}
    assert call.run_context is not None and call.call_id == call.run_context.function_call.call_id
    (exit_,) = session_journal.tool_exits
    assert exit_.result == "Table booked for eight." and exit_.error is None
    # the hold message was created inside the tool body and is attributed to it
    by_tool = [s for s in session_journal.speeches if s.tool == "book_table"]
    assert [s.source for s in by_tool] == ["say"]
    assert all(s.tool is None for s in session_journal.speeches if s not in by_tool)
    assert session_journal.user_states[:2] == ["speaking", "listening"]


def test_a_failing_hook_is_reported_on_the_agent_emitter() -> None:
    class Failing(Middleware):
        async def on_tool_start(self, ctx: Any, call: ToolCall) -> None:
            raise RuntimeError("oops")

    seen: list[MiddlewareErrorEvent] = []

    class Listening(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, middleware=[Failing()], **kwargs)
            self.events.on("middleware_error", seen.append)

    _, outcome = run_scenario(_booking_scenario(), Listening)
    assert outcome.passed, outcome.reasons  # the call went on
    assert [(e.middleware, e.hook) for e in seen] == [("Failing", "on_tool_start")]
    assert "oops" in seen[0].error


def test_a_spec_gives_each_session_its_own_instance_and_an_instance_is_shared() -> None:
    shared = Journal()
    by_instance = with_middleware(shared)
    run_scenario(_booking_scenario("t/one"), by_instance)
    run_scenario(_booking_scenario("t/two"), by_instance)
    assert len(shared.tool_calls) == 2  # one instance, live in both sessions

    by_spec = with_middleware(MiddlewareSpec(Journal))  # type: ignore[arg-type]
    first, _ = run_scenario(_booking_scenario("t/one"), by_spec)
    second, _ = run_scenario(_booking_scenario("t/two"), by_spec)
    one, two = first.agent.middleware["Journal"], second.agent.middleware["Journal"]
    assert one is not two
    assert len(one.tool_calls) == 1 and len(two.tool_calls) == 1  # type: ignore[attr-defined]


def test_controls_behave_identically_on_resilient_agent(lab_calls: LabCalls) -> None:
    controls = [s for s in scenarios() if s.control]
    baseline = AgentUnderTest("livekit.agents:Agent", Agent, reference=True)
    resilient = AgentUnderTest("resilient_agent:ResilientAgent", ResilientAgent)
    results = lab_calls.results(controls, [baseline, resilient])
    by_agent: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        record = result.as_json()
        record.pop("agent")
        record.pop("race_events")  # ResilientAgent reports its hang-up decision; nothing else
        by_agent.setdefault(result.agent.path, []).append(record)
    assert by_agent[baseline.path] == by_agent[resilient.path]
    assert all(r["passed"] for r in by_agent[resilient.path])


class FakeSession(EventEmitter[str]):
    user_state = "listening"
    agent_state = "idle"


def test_the_caller_starting_to_speak_overtakes_queued_bookkeeping() -> None:
    order: list[str] = []

    class Order(Middleware):
        async def on_agent_state(self, ctx: Any, ev: Any) -> None:
            order.append(f"agent:{ev.new_state}")

        async def on_user_state(self, ctx: Any, ev: Any) -> None:
            order.append(f"user:{ev.new_state}")

    async def scenario() -> None:
        from livekit.agents.voice.events import AgentStateChangedEvent, UserStateChangedEvent

        session = FakeSession()
        owner = ResilientAgent(instructions="x", middleware=[])
        bridge = SessionRuntime(session, owner)  # type: ignore[arg-type]
        bridge.start()
        await bridge.activate(owner, MiddlewareChain([Order()]))
        # emitted synchronously in one go, as livekit does from its own task
        session.emit(
            "agent_state_changed", AgentStateChangedEvent(old_state="idle", new_state="thinking")
        )
        session.emit(
            "agent_state_changed",
            AgentStateChangedEvent(old_state="thinking", new_state="speaking"),
        )
        session.emit(
            "user_state_changed", UserStateChangedEvent(old_state="listening", new_state="speaking")
        )
        assert bridge.state.user_state == "speaking"  # the snapshot is already current
        await bridge.stop()

    asyncio.run(scenario())
    assert order == ["user:speaking", "agent:thinking", "agent:speaking"]


@pytest.mark.parametrize("field", ["middleware", "plugins"])
def test_bad_configuration_fails_at_construction(field: str) -> None:
    from resilient_agent import MiddlewareError

    with pytest.raises(MiddlewareError):
        if field == "middleware":
            ResilientAgent(instructions="x", middleware=[object()])  # type: ignore[list-item]
        else:
            ResilientAgent(instructions="x", plugins=["nope"])


def test_a_hook_that_never_returns_does_not_hold_up_the_close() -> None:
    from resilient_agent.testing import run_virtual

    class Stuck(Middleware):
        async def on_session_start(self, ctx: Any) -> None:
            await asyncio.sleep(3600)

    async def scenario() -> float:
        session = FakeSession()
        owner = ResilientAgent(instructions="x", middleware=[])
        bridge = SessionRuntime(session, owner)  # type: ignore[arg-type]
        bridge.start()
        await bridge.activate(owner, MiddlewareChain([Stuck()]))
        await asyncio.sleep(0)
        started = asyncio.get_running_loop().time()
        await bridge.stop()
        return asyncio.get_running_loop().time() - started

    assert run_virtual(scenario()) == pytest.approx(5.0, abs=0.01)
