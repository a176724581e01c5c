"""Per-session middleware without copies (#19): which instance is live, and how to reach it."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
from resilient_agent.middleware import default_middleware

from resilient_agent import (
    Middleware,
    MiddlewareContext,
    MiddlewareError,
    MiddlewareSpec,
    ResilientAgent,
    ToolCall,
)
from resilient_agent._engine.live import SessionInstances
from resilient_agent.lab.catalog import agents
from resilient_agent.testing import LLMRule, Scenario, ToolCallScript, Utterance, run_scenario


def _booking(name: str) -> Scenario:
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


class Audit(Middleware):
    """Holds what cannot be copied: a lock and an open client (a file here)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.client = open(os.devnull, "w")  # noqa: SIM115 - an open client, closed by the test
        self.enabled = True
        self.seen: list[str] = []

    async def on_tool_start(self, ctx: MiddlewareContext, call: ToolCall) -> None:
        if not self.enabled:
            return
        with self.lock:
            self.client.write(call.name)
            self.seen.append(call.name)


def configured(*middleware: Any) -> type[ResilientAgent]:
    class Configured(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, middleware=list(middleware), **kwargs)

    return Configured


def test_a_middleware_holding_a_lock_and_an_open_client_works_across_two_sessions() -> None:
    audit = Audit()
    lock, client = audit.lock, audit.client
    agent_class = configured(audit, *default_middleware())
    try:
        for name in ("t/first", "t/second"):
            world, outcome = run_scenario(_booking(name), agent_class)
            assert outcome.passed, outcome.reasons
            assert world.agent.middleware["Audit"] is audit  # type: ignore[attr-defined]
            assert world.agent.call_report.middleware_errors == []  # type: ignore[attr-defined]
    finally:
        client.close()
    assert audit.seen == ["book_table", "book_table"]
    assert audit.lock is lock and audit.client is client


def test_a_flag_set_on_the_configured_instance_reaches_the_live_one() -> None:
    audit = Audit()

    class Configured(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, middleware=[audit], **kwargs)
            audit.enabled = False  # the app changes its mind after building the agent

    try:
        world, _ = run_scenario(_booking("t/flag"), Configured)
    finally:
        audit.client.close()
    assert audit.seen == []
    assert world.agent.middleware["Audit"] is audit  # type: ignore[attr-defined]


def test_the_live_instance_of_a_spec_is_reached_by_name() -> None:
    agent = ResilientAgent(instructions="x")
    keeper = agent.middleware["TurnKeeper"]
    assert type(keeper).__name__ == "TurnKeeper"
    assert agent.middleware[1] is keeper  # position still works
    keeper.merge = False  # type: ignore[attr-defined]  # before the session: the first live one
    with pytest.raises(KeyError, match="TurnKeeper, WaitForCaller"):
        agent.middleware["TurnKeper"]


def test_a_spec_builds_a_new_instance_for_each_later_session() -> None:
    errors: list[str] = []

    def report(mw: Any, hook: str, exc: BaseException, action: str) -> None:
        errors.append(f"{getattr(mw, 'display_name', mw)}.{hook}")

    instances = SessionInstances([MiddlewareSpec(Audit)])
    built = instances.prototype.middleware[0]
    first = instances.for_session(report).middleware[0]
    instances.release()
    second = instances.for_session(report).middleware[0]
    assert first is built and second is not built and isinstance(second, Audit)
    assert errors == []
    for mw in (first, second):
        mw.client.close()  # type: ignore[attr-defined]


def test_an_instance_is_live_in_one_session_at_a_time() -> None:
    errors: list[str] = []

    def report(mw: Any, hook: str, exc: BaseException, action: str) -> None:
        assert isinstance(exc, MiddlewareError) and "MiddlewareSpec" in str(exc)
        errors.append(f"{mw.display_name}.{hook}:{action}")

    audit = Audit()
    one, two = SessionInstances([audit]), SessionInstances([audit])
    assert one.for_session(report).middleware == (audit,)
    assert two.for_session(report).middleware == ()  # shared while live: left out, reported
    assert errors == ["Audit.session:disabled_for_session"]
    one.release()
    assert two.for_session(report).middleware == (audit,)
    two.release()
    audit.client.close()


def test_a_later_session_whose_spec_cannot_build_runs_without_it() -> None:
    built: list[int] = []

    class Flaky(Middleware):
        def __init__(self) -> None:
            built.append(1)
            if len(built) > 1:
                raise ConnectionError("metrics server down")

    errors: list[str] = []
    instances = SessionInstances([MiddlewareSpec(Flaky)])
    instances.for_session(lambda mw, hook, exc, action: errors.append(hook))
    instances.release()
    assert instances.for_session(lambda mw, h, e, a: errors.append(h)).middleware == ()
    assert errors == ["for_session"]


def test_a_claim_is_the_instances_own_not_an_id_the_next_object_inherits() -> None:
    # the claim is written on the instance: a new object never finds an old one's claim, even
    # one that lives where a collected claimed instance lived (an id() registry saw it busy)
    first = Audit()
    left_open = SessionInstances([first])
    assert left_open.for_session(lambda *args: None).middleware == (first,)
    claims = [value for value in vars(first).values() if value is left_open]
    assert claims, "the live session is noted on the instance"
    second = Audit()
    assert SessionInstances([second]).for_session(lambda *args: None).middleware == (second,)
    left_open.release()
    assert not [value for value in vars(first).values() if value is left_open]
    first.client.close()
    second.client.close()
