"""Every tool call of the session's active agent, run through the active chain.

One place for what a call costs the core: it is counted in flight (the state's
``tools_in_flight``), told to the chain (``on_tool_start`` / ``on_tool_exit``), run through its run
(:meth:`~.chain_run.ChainRun.tool_call`), and, when the session closes under it,
cancelled after a bound and named.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from livekit.agents import AgentSession
from livekit.agents.llm import ToolError

from .._engine.boundary import PASS_THROUGH, HookTimeoutError
from .._engine.log import get_logger
from .._engine.requests import ToolCall, ToolOutcome
from .._engine.state import ConversationState
from .chain_run import ChainRun

__all__ = ["ToolCalls", "worded_tool_errors"]

logger = get_logger("tool_calls")


class ToolCalls:
    """The tool calls running in one session."""

    def __init__(self, session: AgentSession[Any], state: ConversationState) -> None:
        self._session = session
        self._state = state
        self._seq = 0
        self._tasks: dict[int, tuple[ToolCall, asyncio.Task[Any], ChainRun]] = {}

    async def run(
        self, run: ChainRun, call: ToolCall, run_body: Callable[[ToolCall], Awaitable[Any]]
    ) -> Any:
        """Run one call through ``run``'s ``wrap_tool_call`` and report its start and exit."""
        self._seq += 1
        key = self._seq
        self._state.tools_in_flight[key] = call
        task = asyncio.current_task()
        if task is not None:
            self._tasks[key] = (call, task, run)
        run.submit("on_tool_start", call)
        started = time.perf_counter()
        result: Any = None
        error: BaseException | None = None
        try:
            result = await run.tool_call(call, run_body)
            return result
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._state.tools_in_flight.pop(key, None)
            self._tasks.pop(key, None)
            outcome = ToolOutcome(result, error, time.perf_counter() - started)
            run.submit("on_tool_exit", call, outcome)

    def cancel_hung(self, *, interrupted_only: bool) -> None:
        """Cancel tool bodies still running this long into the close, each named."""
        for call, task, run in list(self._tasks.values()):
            if task.done():
                continue
            if interrupted_only and not self._gave_up_on(call):
                continue
            task.cancel()
            hung = HookTimeoutError("tool body still running into the session's close")
            run.report_error("ResilientAgent", f"tool:{call.name}", hung, "cancelled_at_close")

    def _gave_up_on(self, call: ToolCall) -> bool:
        """Whether livekit interrupted the speech this tool belongs to (a close without drain).

        A tool without a ``RunContext`` does not say which speech it belongs to: the session's
        current speech tells (livekit force-interrupts it when closing without drain).
        """
        if call.run_context is not None:
            return call.run_context.speech_handle.interrupted
        current = self._session.current_speech
        return current is None or current.interrupted


async def worded_tool_errors(
    call: ToolCall, run: Callable[[], Awaitable[Any]], message: str | None
) -> Any:
    """Await ``run``; an unexpected exception reaches the LLM worded as ``message`` says.

    None leaves it to livekit, as with ``Agent``: livekit logs it at ERROR and tells the LLM
    only that an internal error occurred. A sentence (``{tool}`` is the tool's name) is given
    to the LLM instead, and the exception is logged at ERROR (``tool_failed``).
    """
    try:
        return await run()
    except PASS_THROUGH:
        raise
    except Exception as exc:
        if message is None:
            raise
        logger.error("tool_failed", tool=call.name, exc_info=exc)
        raise ToolError(message.format(tool=call.name)) from exc
