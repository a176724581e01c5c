"""Tool-call races: user turns never wait for a running tool, and protection never fails a tool.

While a tool body runs after its step's text has played out, livekit treats the tool's owning
speech as a background speech: a committed user turn interrupts it and waits for the tool (up to
the 5 s ``INTERRUPTION_TIMEOUT``, after which livekit cancels the speech and the tool result is
never spoken). The guard protects the owning speech for exactly that stretch, so livekit answers
the caller at once and speaks the tool's result afterwards, and restores the app's setting
before the result is voiced.

``ctx.disallow_interruptions()`` raises when the owning speech was already interrupted; inside a
guarded tool it never fails the tool: the interruption stands (the caller has been heard), the
tool goes on, and its result reaches the history as livekit commits it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from livekit.agents import RunContext

from resilient_agent import Middleware, MiddlewareContext, RaceHandledEvent, ToolCall, ToolCallNext
from resilient_agent.log import get_logger

__all__ = ["ToolGuard"]

logger = get_logger("middleware.tool_guard")


class ToolGuard(Middleware):
    """Keeps tool bodies from blocking user turns and from failing on protection."""

    position = "first"

    async def wrap_tool_call(
        self, ctx: MiddlewareContext, call: ToolCall, call_next: ToolCallNext
    ) -> Any:
        """Guard the owning speech while the body runs."""
        run_context = call.run_context
        if run_context is None:
            return await call_next(call)
        app_disallowed = _make_disallow_safe(ctx, run_context, call.name)
        handle = run_context.speech_handle
        app_setting = handle.allow_interruptions
        protector = asyncio.get_running_loop().create_task(
            _protect_after_playout(run_context), name="resilient_agent.tool_guard"
        )
        try:
            return await call_next(call)
        finally:
            protector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await protector
            protected = protector.done() and not protector.cancelled() and protector.result()
            if protected and not app_disallowed() and not handle.interrupted:
                # the app's own setting applies again to the step that speaks the result
                with contextlib.suppress(RuntimeError):
                    handle.allow_interruptions = app_setting


async def _protect_after_playout(run_context: RunContext[Any]) -> bool:
    handle = run_context.speech_handle
    await run_context.wait_for_playout()
    if handle.interrupted or handle.done() or not handle.allow_interruptions:
        return False
    handle.allow_interruptions = False
    return True


def _make_disallow_safe(
    ctx: MiddlewareContext, run_context: RunContext[Any], tool: str
) -> Callable[[], bool]:
    """Shadow ``disallow_interruptions`` for this call; returns whether the app called it."""
    original = run_context.disallow_interruptions
    called = False

    def disallow_interruptions() -> None:
        nonlocal called
        called = True
        if run_context.speech_handle.interrupted:
            logger.info("protection_after_interruption", tool=tool, action="tool_continued")
            ctx.emit(
                RaceHandledEvent(
                    kind="protect_after_interruption",
                    action="tool_continued",
                    middleware="ToolGuard",
                    details={"tool": tool},
                )
            )
            return
        original()

    # the RunContext is built per call; shadowing its method affects this call only
    run_context.disallow_interruptions = disallow_interruptions  # type: ignore[method-assign]
    return lambda: called
