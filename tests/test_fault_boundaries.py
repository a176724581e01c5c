"""Fault boundaries (#16): one misbehaving middleware in front of the default chain.

Every case runs a lab call with a protected-speech race (the caller talks in the gap before a
tool's protected hold message) with a middleware that misbehaves in one hook, placed first in
front of ``default_middleware()``. For every case: no word is lost, the close does not deadlock,
the race is still handled, and the middleware is named (error event, ``call_report``, log).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from livekit import rtc
from livekit.agents import Agent, function_tool
from resilient_agent.middleware import default_middleware
from resilient_agent.middleware.turn_keeper.withheld_audio import WithheldAudioTap
from structlog.testing import capture_logs

from resilient_agent import (
    ConversationState,
    Middleware,
    MiddlewareContext,
    ResilientAgent,
    SpeechDecision,
)
from resilient_agent.lab.catalog import scenarios
from resilient_agent.testing import LLMRule, Scenario, ToolCallScript, Utterance, run_scenario

RACE_SCENARIO = "tool_gap/gap_protected_say"
HANG_S = 3600.0

NOTIFY = ("on_session_start", "on_user_state", "on_speech_created", "on_tool_start")
WRAP = ("wrap_tool_call", "wrap_user_turn", "wrap_llm_request")
DECIDE = ("decide_speech",)
LIFECYCLE = ("setup", "aclose")


class Broken(Exception):
    pass


def misbehaving(hook: str, behaviour: str) -> Middleware:
    """A middleware that misbehaves in ``hook`` only, the way ``behaviour`` says."""

    async def act() -> None:
        if behaviour == "raise":
            raise Broken(f"{hook} broke")
        if behaviour == "cancel":
            # a stray cancellation: a future the hook awaited was cancelled by someone else;
            # nobody cancelled the hook's task
            stray = asyncio.get_running_loop().create_future()
            stray.cancel()
            await stray
        if behaviour == "hang":
            await asyncio.sleep(HANG_S)

    async def notify(self: Any, ctx: Any, event: Any) -> None:
        await act()

    async def notify_start(self: Any, ctx: Any) -> None:
        await act()

    async def wrap(self: Any, ctx: Any, request: Any, call_next: Any) -> Any:
        if behaviour in ("raise", "hang", "cancel"):
            await act()
        if behaviour == "skip":
            return None
        result = await call_next(request)
        if behaviour == "raise_after":
            raise Broken(f"{hook} broke after call_next")
        if behaviour == "cancel_after":
            raise asyncio.CancelledError
        if behaviour == "hang_after":
            await asyncio.sleep(HANG_S)
        if behaviour == "none":
            return None
        return result

    def decide(self: Any, ctx: Any, subject: Any) -> Any:
        if behaviour == "raise":
            raise Broken(f"{hook} broke")
        if behaviour == "cancel":
            raise asyncio.CancelledError
        return "protect it please"  # wrong_type: not a decision

    async def setup(self: Any, ctx: Any) -> None:
        await act()

    async def aclose(self: Any) -> None:
        await act()

    # a hang costs the middleware's budget in latency: a short one keeps the race in the call
    body: dict[str, Any] = {"position": "first", "name": "Misbehaving", "hook_budget_s": 0.5}
    if hook == "on_session_start":
        body[hook] = notify_start
    elif hook in NOTIFY:
        body[hook] = notify
    elif hook in WRAP:
        body[hook] = wrap
    elif hook in DECIDE:
        body[hook] = decide
    else:
        body[hook] = setup if hook == "setup" else aclose
    return type("Misbehaving", (Middleware,), body)()


WRAP_BEHAVIOURS = (
    "raise",
    "raise_after",
    "skip",
    "none",
    "hang",
    "hang_after",
    "cancel",  # a stray CancelledError: nobody cancelled the hook's task
    "cancel_after",
)

CASES = (
    [(hook, b) for hook in NOTIFY for b in ("raise", "hang", "cancel")]
    + [(hook, b) for hook in LIFECYCLE for b in ("raise", "hang", "cancel")]
    + [(hook, b) for hook in DECIDE for b in ("raise", "wrong_type", "cancel")]
    + [
        (hook, b)
        for hook in WRAP
        for b in WRAP_BEHAVIOURS
        # a user turn hook has no value to return: None after call_next is its normal answer
        if not (hook == "wrap_user_turn" and b == "none")
    ]
)


# A user turn held up by a hang (0.5 s) moves the tool's hold message past the caller's next
# words: the race does not happen at all in these calls (every other check still applies).
RACE_MOVED_AWAY = {("wrap_user_turn", "hang"), ("wrap_user_turn", "hang_after")}


def catalog(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


# a stray cancellation is told from the task's own by Task.cancelling(), new in Python 3.11
STRAY_CANCELLATION_NEEDS_3_11 = (
    "before Python 3.11 a task cannot tell a stray CancelledError from its own cancellation "
    "(Task.cancelling), so a cancelling hook still ends livekit's task there (docs/middleware.md)"
)


def with_first(mw: Middleware) -> type[ResilientAgent]:
    class Configured(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, middleware=[mw, *default_middleware()], **kwargs)

    return Configured


@pytest.mark.parametrize(("hook", "behaviour"), CASES, ids=[f"{h}-{b}" for h, b in CASES])
def test_a_misbehaving_middleware_costs_only_itself(hook: str, behaviour: str) -> None:
    if behaviour.startswith("cancel") and sys.version_info < (3, 11):
        pytest.skip(STRAY_CANCELLATION_NEEDS_3_11)
    with capture_logs() as logs:
        world, outcome = run_scenario(
            catalog(RACE_SCENARIO), with_first(misbehaving(hook, behaviour))
        )
    assert outcome.lost_words == 0, outcome.reasons
    assert outcome.passed, outcome.reasons
    assert not world.close_deadlocked
    handled = {
        (e["kind"], e["action"]) for e in outcome.race_events if e["event"] == "race_handled"
    }
    detected = {e["kind"] for e in outcome.race_events if e["event"] == "race_detected"}
    assert detected <= {kind for kind, _action in handled}, "a race went unhandled"
    if (hook, behaviour) not in RACE_MOVED_AWAY:
        assert ("protected_speech_over_speaking_caller", "caller_stopped") in handled
    report = world.agent.call_report  # type: ignore[attr-defined]
    assert report is not None
    assert f"Misbehaving.{hook}" in report.middleware_errors
    records = [r for r in logs if r["event"] == "middleware_error"]
    assert records and {r["middleware"] for r in records} == {"Misbehaving"}
    assert all(r["hook"] == hook for r in records)


def _hanging_tool_scenario() -> Scenario:
    def build(base: type[Agent]) -> Agent:
        class Hanging(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="x")

            @function_tool
            async def book_table(self, time: str) -> str:
                """Book a table.

                Args:
                    time: When.
                """
                await asyncio.sleep(HANG_S)
                return "booked"

        return Hanging()

    return Scenario(
        name="t/hanging_tool",
        family="t",
        description="",
        agent=build,
        utterances=(Utterance(1.0, 2.8, "please book a table for eight"),),
        llm=(
            LLMRule(
                when_user_says="book",
                tool_calls=(ToolCallScript("book_table", {"time": "eight"}),),
            ),
        ),
        duration=6.0,
    )


def test_a_hanging_tool_body_deadlocks_the_close_of_a_plain_agent() -> None:
    world, _ = run_scenario(_hanging_tool_scenario(), Agent)
    assert world.close_deadlocked


def test_a_hanging_tool_body_is_cancelled_and_named_when_the_session_closes() -> None:
    world, _ = run_scenario(_hanging_tool_scenario(), ResilientAgent)
    assert not world.close_deadlocked
    report = world.agent.call_report  # type: ignore[attr-defined]
    assert report is not None and report.middleware_errors == ["ResilientAgent.tool:book_table"]


def test_a_hung_notify_hook_does_not_hold_up_the_other_middleware() -> None:
    seen: list[str] = []

    class Hangs(Middleware):
        async def on_user_state(self, ctx: MiddlewareContext, ev: Any) -> None:
            await asyncio.sleep(HANG_S)

    class Listens(Middleware):
        async def on_user_state(self, ctx: MiddlewareContext, ev: Any) -> None:
            seen.append(ev.new_state)

    class Configured(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, middleware=[Hangs(), Listens()], **kwargs)

    run_scenario(catalog("control/two_turns"), Configured)
    # the caller spoke twice: both starts and stops reached the second middleware in time
    assert seen == ["speaking", "listening", "speaking", "listening"]


def test_a_budget_can_be_set_per_middleware() -> None:
    class Slow(Middleware):
        hook_budget_s = 10.0

        async def on_session_start(self, ctx: MiddlewareContext) -> None:
            await asyncio.sleep(7.0)  # past the 5 s default, inside its own budget

    class Configured(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, middleware=[Slow()], **kwargs)

    world, _ = run_scenario(catalog("control/two_turns"), Configured)
    assert world.agent.call_report.middleware_errors == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("budget", [0, -1.0, True, "5", 601])
def test_a_bad_budget_is_refused_at_construction(budget: Any) -> None:
    from resilient_agent import MiddlewareError

    class Bad(Middleware):
        async def on_session_start(self, ctx: MiddlewareContext) -> None:
            pass

    mw = Bad()
    mw.hook_budget_s = budget
    with pytest.raises(MiddlewareError, match="hook_budget_s"):
        ResilientAgent(instructions="x", middleware=[mw])


def test_a_decision_of_the_right_type_still_wins() -> None:
    class Protects(Middleware):
        def decide_speech(self, ctx: MiddlewareContext, speech: Any) -> SpeechDecision | None:
            return SpeechDecision.protect("mine")

    from resilient_agent._engine.chain import MiddlewareChain

    chain = MiddlewareChain([misbehaving("decide_speech", "wrong_type"), Protects()])
    assert chain.decide("decide_speech", object(), None) == SpeechDecision.protect("mine")  # type: ignore[arg-type]


class RaisingListener(Middleware):
    """Adds a livekit listener through the context that raises at every event it is given."""

    def __init__(self) -> None:
        self.ctx: MiddlewareContext | None = None

    async def setup(self, ctx: MiddlewareContext) -> None:
        self.ctx = ctx
        ctx.listen(ctx.session, "user_state_changed", self._boom, by=self)

    def _boom(self, _ev: object) -> None:
        raise Broken("listener broke")


def test_a_listener_that_raises_is_reported_by_name_and_the_call_goes_on() -> None:
    listener = RaisingListener()
    with capture_logs() as logs:
        world, outcome = run_scenario(catalog(RACE_SCENARIO), with_first(listener))
    assert outcome.lost_words == 0 and outcome.passed, outcome.reasons
    report = world.agent.call_report  # type: ignore[attr-defined]
    assert report is not None
    assert report.middleware_errors.count("RaisingListener.listener:user_state_changed") >= 2
    records = [r for r in logs if r["event"] == "middleware_error"]
    assert records and {r["middleware"] for r in records} == {"RaisingListener"}
    assert {r["action"] for r in records} == {"continued_without_it"}
    # the chain's close removed it
    assert listener.ctx is not None and len(listener.ctx.subscriptions) == 0


def test_a_listener_added_through_the_context_is_removed_with_its_middleware() -> None:
    reported: list[str] = []
    ctx = MiddlewareContext(
        session=None,  # type: ignore[arg-type]
        agent=None,  # type: ignore[arg-type]
        state=ConversationState(),
        emit=lambda _event: None,
        report_error=lambda mw, hook, exc, action: reported.append(
            f"{mw.display_name}.{hook}:{action}"
        ),
    )
    emitter: rtc.EventEmitter[str] = rtc.EventEmitter()
    heard: list[object] = []
    after: list[object] = []
    listener = RaisingListener()

    def boom(event: object) -> None:
        heard.append(event)
        raise Broken("listener broke")

    ctx.listen(emitter, "tick", boom, by=listener)
    stop = ctx.listen(emitter, "tick", heard.append, by=listener)
    emitter.on("tick", after.append)
    emitter.emit("tick", 1)  # the failure is reported; the emitter goes on to the next listener
    assert reported == ["RaisingListener.listener:tick:continued_without_it"]
    assert heard == [1, 1] and after == [1]
    stop()
    emitter.emit("tick", 2)
    assert heard == [1, 1, 2]
    ctx.release(listener)  # what the chain does at the middleware's close
    emitter.emit("tick", 3)
    assert heard == [1, 1, 2] and after == [1, 2, 3] and len(ctx.subscriptions) == 0


def test_a_raising_listener_of_the_audio_tap_costs_the_tap_alone(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # the tap's listeners follow it across handoffs, past the keeper that made it: they are
    # the tap's own inside the fault boundary, reported under its name, and livekit's emitter
    # goes on to the session's other listeners
    def boom(self: WithheldAudioTap, _event: object) -> None:
        raise Broken("tap listener broke")

    monkeypatch.setattr(WithheldAudioTap, "_speech_created", boom)
    with capture_logs() as logs:
        world, _ = run_scenario(catalog(RACE_SCENARIO), with_first(RaisingListener()))
    report = world.agent.call_report  # type: ignore[attr-defined]
    assert report is not None
    assert report.middleware_errors.count("TurnKeeper.tap.listener:speech_created") >= 2
    records = [r for r in logs if r["event"] == "middleware_error"]
    assert {r["middleware"] for r in records} == {"RaisingListener", "TurnKeeper.tap"}
    assert {r["action"] for r in records} == {"continued_without_it"}
    # the chain's other listeners on the session still heard every event
    assert report.middleware_errors.count("RaisingListener.listener:user_state_changed") >= 2
    # livekit's emitter never saw the failure (it would log it, with no name)
    assert not [r for r in caplog.records if "failed to emit event" in r.getMessage()]
