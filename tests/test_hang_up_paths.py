"""Every hang-up the app asks for goes through decide_shutdown; a close it did not ask for never.

Paths: livekit's EndCallTool (a toolset, hanging up from its speech's done callback), the app's
own speech-done callback, an app task, ``end_call_tool`` with its defaults, the caller leaving.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from livekit.agents import Agent
from livekit.agents.beta.tools import EndCallTool

from resilient_agent import (
    Middleware,
    MiddlewareContext,
    ResilientAgent,
    ShutdownDecision,
    ShutdownRequest,
    ToolCall,
    end_call_tool,
)
from resilient_agent._session.tools import ChainedToolset
from resilient_agent.lab.catalog import agents, scenarios
from resilient_agent.testing import (
    CallWorld,
    LLMRule,
    Scenario,
    ToolCallScript,
    Utterance,
    run_scenario,
)

FAREWELL = "Thank you for calling. Goodbye!"
GOODBYE = Utterance(1.0, 2.2, "okay goodbye", expect_reply=False)


def catalog(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


def shutdown_events(outcome: Any) -> list[tuple[str, str | None, str]]:
    return [
        (e["action"], e["source"], e["reason"])
        for e in outcome.race_events
        if e["kind"] == "shutdown_request"
    ]


def farewell_end(world: CallWorld) -> float:
    ends = [s.ended_at for s in world.audio_out.segments if s.sentences and s.ended_at is not None]
    return max(ends)


def test_livekit_end_call_tool_keeps_the_call_when_the_goodbye_is_interrupted() -> None:
    scenario = catalog("end_call/livekit_tool_question_over_goodbye")
    _, plain = run_scenario(scenario, Agent)
    assert plain.hung_up and not plain.passed
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert not outcome.hung_up
    # livekit's own session.shutdown(), from the done callback of the tool's speech
    # which veto reason applies depends on the livekit release: 1.8.9 marks the goodbye
    # interrupted, 1.8.0 only sees the caller speaking after it began; the call is kept on both
    ((action, source, reason),) = shutdown_events(outcome)
    assert (action, source) == ("kept_call", "session.shutdown")
    assert reason in (
        "the caller interrupted the farewell",
        "the caller spoke after the farewell began",
    )
    assert outcome.reply_latencies_s[-1] is not None and outcome.reply_latencies_s[-1] <= 1.3


def test_livekit_end_call_tool_ends_the_call_whole_within_a_second_of_a_heard_goodbye() -> None:
    world, outcome = run_scenario(catalog("control/livekit_tool_goodbye_heard"), ResilientAgent)
    assert outcome.passed, outcome.reasons
    end = farewell_end(world)
    job = world.job
    assert job.session_closed_at is not None and job.session_closed_at - end <= 1.0
    assert job.shutdowns and job.shutdowns[0][0] - end <= 1.0
    assert job.room_deletions and job.room_deletions[0] - end <= 1.0
    assert shutdown_events(outcome) == [("hung_up", "session.shutdown", "farewell heard")]


def test_the_whole_hang_up_contract_fails_when_the_room_is_kept() -> None:
    def keeps_room(base: type[Agent]) -> Agent:
        return base(instructions=agents.INSTRUCTIONS, tools=[EndCallTool(delete_room=False)])

    scenario = dataclasses.replace(catalog("control/livekit_tool_goodbye_heard"), agent=keeps_room)
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert "farewell heard, but never: the room was deleted" in outcome.reasons


def test_a_caller_who_speaks_right_after_the_goodbye_keeps_the_call() -> None:
    scenario = catalog("end_call/livekit_tool_caller_speaks_after_goodbye")
    _, plain = run_scenario(scenario, Agent)
    assert plain.hung_up
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    # heard to the end, then the caller spoke during the tail pad: asked again, kept
    assert shutdown_events(outcome) == [
        ("kept_call", "session.shutdown", "the caller spoke after the farewell began")
    ]


def test_a_hang_up_from_the_apps_farewell_callback_goes_through_the_chain() -> None:
    scenario = catalog("end_call/app_shutdown_from_farewell_callback")
    _, plain = run_scenario(scenario, Agent)
    assert plain.hung_up
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert [a for a, _, _ in shutdown_events(outcome)] == ["kept_call"]


def test_the_caller_leaving_during_the_goodbye_closes_at_once() -> None:
    scenario = catalog("control/caller_leaves_during_goodbye")
    plain_world, plain = run_scenario(scenario, Agent)
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert plain.passed and outcome.passed, (plain.reasons, outcome.reasons)
    # the same close as on a plain Agent: livekit's own, held by nobody
    closed, plain_closed = world.job.session_closed_at, plain_world.job.session_closed_at
    assert closed is not None and plain_closed is not None
    assert abs(closed - plain_closed) < 0.01
    assert world.job.shutdowns[0][1] == "participant_disconnected"
    assert shutdown_events(outcome) == []


def test_toolsets_run_through_the_chain() -> None:
    seen: list[str] = []

    class Recorder(Middleware):
        async def on_tool_start(self, ctx: MiddlewareContext, call: ToolCall) -> None:
            seen.append(call.name)

    toolset = EndCallTool()
    agent = ResilientAgent(instructions="x", tools=[toolset], middleware=[Recorder()])
    (wrapped,) = agent.tools
    assert isinstance(wrapped, ChainedToolset) and wrapped.inner is toolset
    assert wrapped.id == toolset.id

    def build(base: type[Agent]) -> Agent:
        return agent

    scenario = dataclasses.replace(catalog("control/livekit_tool_goodbye_heard"), agent=build)
    run_scenario(scenario, ResilientAgent)
    assert seen == ["end_call"]


class _Veto(Middleware):
    def decide_shutdown(
        self, ctx: MiddlewareContext, request: ShutdownRequest
    ) -> ShutdownDecision | None:
        return ShutdownDecision.veto(f"{request.source} from {request.tool}")


def _task_agent(*, close: bool) -> Any:
    def build(base: type[Agent]) -> Agent:
        class TaskAgent(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="x", middleware=[_Veto()])

            async def on_enter(self) -> None:
                self._task = asyncio.get_running_loop().create_task(self._later())

            async def _later(self) -> None:
                await asyncio.sleep(2.0)
                if close:
                    await self.session.aclose()  # the app's teardown
                else:
                    self.session.shutdown()  # the app's hang-up, from a task of its own

        return TaskAgent()

    return build


def _task_scenario(*, close: bool) -> Scenario:
    return Scenario(
        name="t/task", family="t", description="", agent=_task_agent(close=close), utterances=()
    )


def test_a_hang_up_from_an_app_task_goes_through_decide_shutdown() -> None:
    world, outcome = run_scenario(_task_scenario(close=False), ResilientAgent)
    assert not world.closed_by_app
    assert shutdown_events(outcome) == [
        ("kept_call", "session.shutdown", "session.shutdown from None")
    ]


def test_a_teardown_with_aclose_outside_tools_is_never_held() -> None:
    world, outcome = run_scenario(_task_scenario(close=True), ResilientAgent)
    assert world.closed_by_app
    assert shutdown_events(outcome) == []


def _end_call_tool_scenario(**options: Any) -> Scenario:
    def build(base: type[Agent]) -> Agent:
        return base(instructions="x", tools=[end_call_tool(farewell=FAREWELL, **options)])

    return Scenario(
        name="t/end_call_tool",
        family="t",
        description="",
        agent=build,
        utterances=(GOODBYE,),
        llm=(LLMRule(when_user_says="goodbye", tool_calls=(ToolCallScript("end_call"),)),),
        farewell=FAREWELL,
        duration=14.0,
        hang_up_within=1.0,
        session_options={"session_close_transcript_timeout": 0.5},
    )


def test_end_call_tool_defaults_leave_no_caller_connected() -> None:
    world, outcome = run_scenario(_end_call_tool_scenario(), ResilientAgent)
    assert outcome.passed, outcome.reasons
    end = farewell_end(world)
    job = world.job
    assert job.room_deletions and job.room_deletions[0] - end <= 0.3 + 0.05
    assert job.shutdowns and job.shutdowns[0][1] == "end_call"
    assert job.session_closed_at is not None and job.shutdowns[0][0] >= job.session_closed_at


def test_end_call_tool_can_keep_the_room() -> None:
    world, outcome = run_scenario(_end_call_tool_scenario(delete_room=False), ResilientAgent)
    assert world.job.room_deletions == []
    assert world.job.shutdowns  # the job still ends: the agent leaves the room
    assert "farewell heard, but never: the room was deleted" in outcome.reasons


# -- a vetoed hang-up: the model is told the call goes on; a later goodbye hangs up once ------

REFUND_ANSWER = "A refund takes five working days."


def _goodbye_again(scenario: Scenario) -> Scenario:
    """``scenario`` (a hang-up vetoed by a question over the goodbye), then a second goodbye."""
    again = Utterance(12.0, 13.0, "thanks goodbye", expect_reply=False)
    return dataclasses.replace(scenario, utterances=(*scenario.utterances, again), duration=25.0)


def _library_tool_scenario() -> Scenario:
    def build(base: type[Agent]) -> Agent:
        return base(instructions="x", tools=[end_call_tool(farewell=FAREWELL)])

    return dataclasses.replace(
        catalog("end_call/livekit_tool_question_over_goodbye"),
        agent=build,
        llm=(
            LLMRule(when_user_says="goodbye", tool_calls=(ToolCallScript("end_call"),)),
            LLMRule(when_user_says="refund", text=REFUND_ANSWER),
        ),
        farewell=FAREWELL,
    )


def _told_the_call_goes_on(world: CallWorld) -> bool:
    """The model's context says once, before the question's answer, the call was not ended."""
    items = world.agent.chat_ctx.items
    notes = [
        n
        for n, i in enumerate(items)
        if i.type == "message" and i.role == "system" and "call goes on" in (i.text_content or "")
    ]
    answers = [
        n
        for n, i in enumerate(items)
        if i.type == "message" and i.role == "assistant" and i.text_content == REFUND_ANSWER
    ]
    return len(notes) == 1 and len(answers) == 1 and notes[0] < answers[0]


def test_after_a_vetoed_livekit_end_call_a_second_goodbye_deletes_the_room_once() -> None:
    scenario = _goodbye_again(catalog("end_call/livekit_tool_question_over_goodbye"))
    plain_world, plain = run_scenario(scenario, Agent)
    assert plain.hung_up and plain_world.job.room_deletions[0] < 8.0  # over the question
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert [a for a, _, _ in shutdown_events(outcome)] == ["kept_call", "hung_up"]
    # livekit's EndCallTool adds a close listener per call: one deletion, not one per call
    assert len(world.job.room_deletions) == 1, world.job.room_deletions
    assert _told_the_call_goes_on(world)


def test_after_a_vetoed_end_call_tool_a_second_goodbye_hangs_up_once() -> None:
    scenario = _goodbye_again(_library_tool_scenario())
    world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert [a for a, _, _ in shutdown_events(outcome)] == ["kept_call", "hung_up"]
    assert len(world.job.room_deletions) == 1
    assert [reason for _, reason in world.job.shutdowns] == ["end_call"]
    assert _told_the_call_goes_on(world)


def test_a_heard_goodbye_tells_the_model_nothing() -> None:
    world, outcome = run_scenario(catalog("control/livekit_tool_goodbye_heard"), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert not _told_the_call_goes_on(world)
    assert len(world.job.room_deletions) == 1
