"""SpeakingGuard on its own, through the chain, loaded as a plugin, and in a real lab call."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from livekit.agents import RunContext, function_tool
from resilient_agent import (
    ConversationState,
    Middleware,
    MiddlewareContext,
    MiddlewareError,
    MiddlewareSpec,
    RaceHandledEvent,
    ResilientAgent,
    ToolCall,
)
from resilient_agent._engine.chain import MiddlewareChain
from resilient_agent.testing import LLMRule, Scenario, ToolCallScript, Utterance, run_scenario

from resilient_agent_example_plugin import REFUSAL, SpeakingGuard


class ToolBody:
    """Stands in for a tool body: records the calls that reached it."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []

    async def __call__(self, call: ToolCall) -> str:
        self.calls.append(call)
        return f"{call.name} done"


def context(user_state: Any, events: list[Any]) -> MiddlewareContext:
    # the guard reads only the state and the emitter; no livekit session is needed
    return MiddlewareContext(
        session=cast(Any, None),
        agent=cast(Any, None),
        state=ConversationState(user_state=user_state),
        emit=events.append,
    )


def run_guard(guard: Middleware, user_state: str, tool: str) -> tuple[Any, ToolBody, list[Any]]:
    events: list[Any] = []
    body = ToolBody()
    chain = MiddlewareChain([guard])
    call = ToolCall(name=tool, call_id="call_1")
    result = asyncio.run(chain.wrap_tool_call(context(user_state, events), call, body))
    return result, body, events


def test_refuses_a_guarded_tool_while_the_caller_speaks() -> None:
    result, body, events = run_guard(SpeakingGuard(), "speaking", "end_call")

    assert body.calls == []
    assert result == REFUSAL.format(tool="end_call")
    assert len(events) == 1
    assert isinstance(events[0], RaceHandledEvent)
    assert (events[0].kind, events[0].action, events[0].middleware) == (
        "tool_while_caller_speaking",
        "refused_tool",
        "speaking_guard",
    )
    assert events[0].details == {"tool": "end_call", "call_id": "call_1"}


@pytest.mark.parametrize("user_state", ["listening", "away"])
def test_runs_a_guarded_tool_when_the_caller_is_not_speaking(user_state: str) -> None:
    result, body, events = run_guard(SpeakingGuard(), user_state, "end_call")

    assert result == "end_call done"
    assert [c.name for c in body.calls] == ["end_call"]
    assert events == []


def test_other_tools_run_while_the_caller_speaks() -> None:
    result, body, events = run_guard(SpeakingGuard(), "speaking", "lookup_order")

    assert result == "lookup_order done"
    assert [c.name for c in body.calls] == ["lookup_order"]
    assert events == []


def test_tools_and_refusal_are_configurable_through_a_spec() -> None:
    spec = MiddlewareSpec(SpeakingGuard, tools=["cancel_order"], refusal="wait ({tool})")

    refused, refused_body, _ = run_guard(spec.build(), "speaking", "cancel_order")
    allowed, _, _ = run_guard(spec.build(), "speaking", "end_call")

    assert (refused, refused_body.calls) == ("wait (cancel_order)", [])
    assert allowed == "end_call done"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tools": "end_call"}, "tools='end_call' is a str, not a list. Fix: write tools=['end"),
        ({"tools": ["end_call", 3]}, "tools[1]=3 is an int, not a string"),
        ({"tools": {"end_call": True}}, "tools={'end_call': True} is a dict, not a list"),
        ({"refusal": "wait for {tol}"}, "refusal='wait for {tol}' does not render"),
        ({"refusal": None}, "refusal=None is None, not a string"),
    ],
)
def test_bad_options_are_refused_naming_the_option_and_the_fix(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(MiddlewareError) as err:
        SpeakingGuard(**options)
    assert message in str(err.value) and "Fix: " in str(err.value)


def test_only_the_tool_names_the_app_chose_are_checked_against_the_agents_tools() -> None:
    assert SpeakingGuard().option_tool_names() == {"tools": frozenset()}
    chosen = SpeakingGuard(tools={"cancel_order", "end_call"})
    assert chosen.option_tool_names() == {"tools": frozenset({"cancel_order", "end_call"})}
    assert chosen.tools == frozenset({"cancel_order", "end_call"})


def test_loads_by_name_as_a_plugin() -> None:
    agent = ResilientAgent(instructions="x", middleware=[], plugins=["speaking_guard"])

    assert [type(mw) for mw in agent.middleware] == [SpeakingGuard]
    assert agent.middleware[0].display_name == "speaking_guard"


# -- a real AgentSession on the lab's virtual clock -------------------------------------------
# The caller asks for billing, the LLM answers with transfer_call 0.5 s after the turn ends
# (about 3.25 s into the call), and the caller starts "wait one more thing" at 3.0 s: without
# the guard the transfer runs while they speak, before livekit's interruption threshold.


class FrontDesk(ResilientAgent):
    def __init__(self, plugins: list[str]) -> None:
        super().__init__(instructions="Answer the phone.", middleware=[], plugins=plugins)
        self.transfers = 0
        self.handled: list[RaceHandledEvent] = []
        self.events.on("race_handled", self.handled.append)

    @function_tool
    async def transfer_call(self, ctx: RunContext[None]) -> str:
        """Transfer the caller to the billing team."""
        self.transfers += 1
        return "Transferred to billing."


def call_asking_for_billing(*, plugins: list[str], second_onset: float | None) -> Any:
    agents: list[FrontDesk] = []

    def build(base: Any) -> FrontDesk:
        agents.append(FrontDesk(plugins))
        return agents[-1]

    utterances = [Utterance(1.0, 2.2, "transfer me to billing", expect_reply=False)]
    if second_onset is not None:
        utterances.append(Utterance(second_onset, second_onset + 1.5, "wait one more thing"))
    scenario = Scenario(
        name="example_plugin/transfer_then_more",
        family="example_plugin",
        description="The caller asks for a transfer, then speaks again as the transfer is due.",
        agent=build,
        utterances=tuple(utterances),
        llm=(LLMRule(when_user_says="billing", tool_calls=(ToolCallScript("transfer_call"),)),),
        duration=10.0,
    )
    world, _ = run_scenario(scenario, ResilientAgent)
    return world, agents[0]


def test_without_the_guard_the_transfer_runs_while_the_caller_speaks() -> None:
    # the control: the race this plugin exists for happens in the lab
    _, agent = call_asking_for_billing(plugins=[], second_onset=3.0)

    assert agent.transfers == 1


def test_the_guard_holds_the_transfer_and_the_caller_gets_an_answer() -> None:
    world, agent = call_asking_for_billing(plugins=["speaking_guard"], second_onset=3.0)

    assert agent.transfers == 0
    assert [(e.kind, e.details["tool"]) for e in agent.handled] == [
        ("tool_while_caller_speaking", "transfer_call")
    ]
    outputs = [i.output for i in world.session.history.items if i.type == "function_call_output"]
    assert outputs == [REFUSAL.format(tool="transfer_call")]
    assert "wait one more thing" in [r.last_user_text for r in world.llm.requests]


def test_the_guard_lets_the_transfer_run_when_the_caller_stays_quiet() -> None:
    _, agent = call_asking_for_billing(plugins=["speaking_guard"], second_onset=None)

    assert agent.transfers == 1
    assert agent.handled == []
