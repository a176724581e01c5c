"""One path for race events: middleware report through the context, the agent logs once."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import resilient_agent
from resilient_agent import (
    Middleware,
    MiddlewareContext,
    RaceDetectedEvent,
    RaceHandledEvent,
    ResilientAgent,
    ToolCall,
)
from resilient_agent._session.report import CallReporter
from resilient_agent.lab.catalog import scenarios
from resilient_agent.testing import run_scenario

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = (
    "TurnKeeper",
    "ToolGuard",
    "WaitForCaller",
    "Watchdog",
    "InterruptDeferral",
    "ContextIntegrity",
)


def catalog(name: str) -> Any:
    return next(s for s in scenarios() if s.name == name)


@pytest.mark.parametrize(
    "name",
    [
        "lost_words/over_protected_say",
        "tool_gap/gap_protected_say",
        "vad/stuck_plain_agent",
        "end_call/question_during_sleep_protected",
        "lost_words/typed_over_protected_say",
    ],
)
def test_every_race_event_is_logged_exactly_once(name: str) -> None:
    with capture_logs() as logs:
        _world, outcome = run_scenario(catalog(name), ResilientAgent)
    assert outcome.race_events, "the scenario must produce races for this test to mean anything"
    records = [r for r in logs if r["event"] in ("race_detected", "race_handled")]
    assert len(records) == len(outcome.race_events)
    kinds = {e["kind"] for e in outcome.race_events}
    actions = {e.get("action") for e in outcome.race_events} - {None}
    # no middleware logs its race again under a name of its own
    assert not [r for r in logs if r["event"] in kinds | actions]


def test_a_failing_hook_is_one_error_record_named_middleware_error() -> None:
    class Failing(Middleware):
        async def on_user_state(self, ctx: Any, ev: Any) -> None:
            raise RuntimeError("oops")

    class Configured(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, middleware=[Failing()], **kwargs)

    with capture_logs() as logs:
        run_scenario(catalog("control/two_turns"), Configured)
    errors = [r for r in logs if r["log_level"] == "error"]
    assert errors, "the failing hook must be reported"
    assert {r["event"] for r in errors} == {"middleware_error"}
    assert {(r["middleware"], r["hook"]) for r in errors} == {("Failing", "on_user_state")}
    # one record per failure: as many records as times the caller changed state
    assert all(r["exc_info"] is not None for r in errors)


def test_race_helpers_emit_events_with_the_middleware_name_and_counts() -> None:
    emitted: list[Any] = []

    class Mine(Middleware):
        name = "Mine"

    ctx = MiddlewareContext(session=None, agent=None, state=None, emit=emitted.append)  # type: ignore[arg-type]
    ctx.race_detected(Mine(), "my_race", details={"speech_id": "s1"}, counts={"things": 2})
    ctx.race_handled("Other", "my_race", "fixed_it", counts={"things": 1, "fixes": 1})
    detected, handled = emitted
    assert isinstance(detected, RaceDetectedEvent) and detected.middleware == "Mine"
    assert detected.details == {"speech_id": "s1"} and detected.counts == {"things": 2}
    assert isinstance(handled, RaceHandledEvent) and handled.middleware == "Other"
    reporter = CallReporter("call_1")
    for event in emitted:
        reporter.record(event)
    report = reporter.report()
    assert report.counters == {"things": 3, "fixes": 1}
    assert report.races == {"my_race": 1} and report.actions == {"my_race:fixed_it": 1}


def test_the_core_names_no_first_party_middleware_or_race() -> None:
    core = [
        "_session/report.py",
        "_engine/events.py",
        "_engine/chain.py",
        "_session/runtime.py",
        "_session/active_chain.py",
        "_session/session_listeners.py",
        "_session/event_hub.py",
        "_session/chain_run.py",
        "_session/supervision.py",
        "_session/tool_calls.py",
        "_engine/carry.py",
        "_session/agent.py",
        "_engine/state.py",
        "_engine/log.py",
    ]
    for module in core:
        source = (ROOT / "resilient_agent" / module).read_text()
        for name in (*FIRST_PARTY, "dropped_user_turn", "recovered_words", "words_recovered"):
            assert name not in source, f"resilient_agent/{module} names {name!r}"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_first_party_middleware_imports_only_the_public_api() -> None:
    public = {
        "resilient_agent",
        "resilient_agent._engine.errors",
        "resilient_agent._engine.options",
        "resilient_agent._engine.pending_words",
    }
    paths = sorted((ROOT / "middleware").rglob("*.py"))
    assert any(path.parent.name == "turn_keeper" for path in paths)
    for path in paths:
        ours = {m for m in _imports(path) if m.split(".")[0] == "resilient_agent"}
        private = ours - public
        assert not private, f"{path.relative_to(ROOT)} imports {sorted(private)}"


def test_what_first_party_middleware_needs_is_exported() -> None:
    for name in ("InferenceNext", "get_logger", "CallReport", "MiddlewareContext", "ToolCall"):
        assert name in resilient_agent.__all__


def test_a_third_party_event_is_counted_like_a_first_party_one() -> None:
    class Plugin(Middleware):
        async def on_tool_start(self, ctx: MiddlewareContext, call: ToolCall) -> None:
            ctx.race_detected(self, "plugin_race", counts={"plugin_things": 1})

    class Configured(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, middleware=[Plugin()], **kwargs)

    world, _ = run_scenario(catalog("tool_gap/gap_protected_say"), Configured)
    report = world.agent.call_report  # type: ignore[attr-defined]
    assert report is not None
    assert report.races == {"plugin_race": 1} and report.counters == {"plugin_things": 1}
