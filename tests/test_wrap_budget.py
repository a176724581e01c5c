"""A wrap hook's budget: counted outside ``call_next`` only, with no loop work until it waits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from resilient_agent import Middleware, ToolCall
from resilient_agent._engine.chain import MiddlewareChain
from resilient_agent.testing import run_virtual

CTX: Any = object()


class Around(Middleware):
    """Waits ``before`` s, calls call_next, then waits ``after`` s (each outside call_next)."""

    hook_budget_s = 1.0

    def __init__(self, before: float = 0.0, after: float = 0.0) -> None:
        self.before = before
        self.after = after

    async def wrap_tool_call(self, ctx: Any, call: ToolCall, call_next: Any) -> Any:
        if self.before:
            await asyncio.sleep(self.before)
        result = await call_next(call)
        if self.after:
            await asyncio.sleep(self.after)
        return result


def _call(mw: Middleware, body_s: float) -> tuple[Any, list[tuple[str, str, float]], float]:
    """Run one tool call through ``mw`` (a body of ``body_s``): result, reports, body's end."""
    reports: list[tuple[str, str, float]] = []
    ended: list[float] = []

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        chain = MiddlewareChain(
            [mw],
            on_error=lambda _mw, hook, exc, action: reports.append(
                (type(exc).__name__, action, loop.time())
            ),
        )

        async def body(call: ToolCall) -> str:
            if body_s:
                await asyncio.sleep(body_s)
            ended.append(loop.time())
            return "done"

        return await chain.wrap_tool_call(CTX, ToolCall("t"), body)

    result = run_virtual(main())
    return result, reports, ended[-1] if ended else -1.0


def test_a_wrap_hook_that_waits_only_inside_call_next_leaves_nothing_on_the_loop() -> None:
    # its budget sets no timer and schedules no callback: the hook never waited while counting
    left: list[tuple[int, int]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        class Inner(Around):
            name = "inner"

        chain = MiddlewareChain([Around(), Inner()])

        async def body(call: ToolCall) -> str:
            return "done"

        ready, timers = len(loop._ready), len(loop._scheduled)  # type: ignore[attr-defined]
        assert await chain.wrap_tool_call(CTX, ToolCall("t"), body) == "done"
        left.append(
            (len(loop._ready) - ready, len(loop._scheduled) - timers)  # type: ignore[attr-defined]
        )

    run_virtual(main())
    assert left == [(0, 0)]


def test_a_wrap_hook_that_hangs_before_call_next_is_cut_a_whole_budget_after_it_began() -> None:
    result, reports, ended = _call(Around(before=60.0), body_s=2.0)
    assert result == "done"  # bypassed: call_next ran as if the middleware were absent
    assert reports == [("HookTimeoutError", "bypassed", pytest.approx(1.0))]
    assert ended == pytest.approx(3.0)


def test_a_wrap_hook_that_hangs_after_call_next_is_cut_a_whole_budget_after_it_returned() -> None:
    # the 2 s call_next took do not count: the budget counts again from its return
    result, reports, ended = _call(Around(after=60.0), body_s=2.0)
    assert result == "done"  # call_next's result kept
    assert ended == pytest.approx(2.0)
    assert reports == [("HookTimeoutError", "kept_inner_result", pytest.approx(3.0))]


def test_a_wrap_hook_that_waits_within_its_budget_is_not_cut() -> None:
    result, reports, _ = _call(Around(before=0.6, after=0.6), body_s=2.0)
    assert (result, reports) == ("done", [])
