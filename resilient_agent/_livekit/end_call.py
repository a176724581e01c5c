"""Hanging up for real: ``end_call_tool`` and ``ResilientAgent.hang_up_after_farewell``.

A hang-up ends the call the way livekit's ``EndCallTool`` does, so no caller is left connected
to a closed agent: the session closes, the room is deleted (a SIP caller's line drops; on by
default, ``delete_room=False`` keeps the room), and once the session has closed the job shuts
down. The hang-up goes through ``decide_shutdown``, so a caller who interrupts the farewell or
speaks after it began keeps the call and is answered.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Protocol, runtime_checkable

from livekit.agents import AgentSession, RunContext, function_tool, get_job_context
from livekit.agents.llm import FunctionTool, ToolError
from livekit.agents.voice import events as lk_events

from .._engine.log import get_logger
from .._engine.options import OptionChecker
from .._engine.requests import SpeechInfo
from .shutdown import ShutdownGate

__all__ = ["end_call_tool", "end_the_call", "hang_up_after_farewell"]

DEFAULT_FAREWELL = "Thank you for calling. Goodbye!"
# what LLM providers accept as a function name (OpenAI's rule; the others' are looser or equal)
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

logger = get_logger("end_call")


@runtime_checkable
class FarewellHangUp(Protocol):
    """An agent that hangs up after a farewell: a ``ResilientAgent``."""

    def hang_up_after_farewell(
        self,
        farewell: str | None = None,
        *,
        delete_room: bool = True,
        allow_interruptions: bool = True,
    ) -> bool:
        """Say ``farewell`` and hang up once it played to the end; returns at once."""
        ...


def end_call_tool(
    *,
    farewell: str = DEFAULT_FAREWELL,
    delete_room: bool = True,
    require_caller_request: bool = False,
    name: str = "end_call",
    description: str = (
        "End the call when the caller says goodbye or asks to hang up. "
        "The farewell is said for you; do not say goodbye yourself."
    ),
) -> FunctionTool[..., Any]:
    """A function tool for a ``ResilientAgent`` that says ``farewell`` and hangs up after it.

    The tool returns at once; the hang-up goes through ``decide_shutdown``, so a caller who
    interrupts the farewell or speaks after it began keeps the call and is answered.

    Args:
        farewell: What the agent says before hanging up.
        delete_room: Delete the room when hanging up, which drops every participant (SIP
            callers included); False keeps the room (e.g. a human takes the call over).
        require_caller_request: Refuse when the last message in the history is not the
            caller's (the LLM decided to hang up on its own, e.g. after a tool result).
        name: The tool's name as the LLM sees it.
        description: The tool's description as the LLM sees it.

    Raises:
        OptionError: An option has the wrong type, or ``farewell`` or ``name`` is blank (it is
            a ``ValueError`` too).
    """
    check = OptionChecker("end_call_tool")
    farewell = check.text("farewell", farewell)
    delete_room = check.flag("delete_room", delete_room)
    require_caller_request = check.flag("require_caller_request", require_caller_request)
    name = check.text("name", name)
    if not _TOOL_NAME.fullmatch(name):
        check.fail(
            "name",
            name,
            "is not a function name LLM providers accept",
            fix="use at most 64 letters, digits, _ or -, e.g. name='end_call'",
        )
    description = check.text("description", description)

    @function_tool(name=name, description=description)
    async def end_call(ctx: RunContext[Any]) -> str | None:
        agent = ctx.session.current_agent
        if not isinstance(agent, FarewellHangUp):
            raise ToolError("end_call_tool only works on a ResilientAgent")
        if require_caller_request and not _caller_spoke_last(ctx):
            return "The caller did not ask to end the call. Do not hang up; keep helping."
        agent.hang_up_after_farewell(farewell, delete_room=delete_room)
        return None

    return end_call


def hang_up_after_farewell(
    session: AgentSession[Any],
    gate: ShutdownGate | None,
    farewell: SpeechInfo | None,
    *,
    delete_room: bool,
) -> bool:
    """Hang up once ``farewell`` played, through ``gate`` (``decide_shutdown``) if there is one.

    Returns:
        False if a hang-up was already pending.
    """

    def hang_up() -> None:
        end_the_call(session, delete_room=delete_room)

    if gate is None:
        # no middleware decides shutdowns: hang up once the farewell is done, as asked
        if farewell is None:
            hang_up()
        else:
            farewell.handle.add_done_callback(lambda _h: hang_up())
        return True
    return gate.request("end_call", hang_up, farewell=farewell)


def end_the_call(session: AgentSession[Any], *, delete_room: bool) -> None:
    """Close the session, delete the room (if asked), and shut the job down once closed.

    The farewell has played out, so nothing is left to drain. Without a job (a test, the
    console) only the session closes.
    """
    try:
        job = get_job_context()
    except RuntimeError:
        job = None
    if job is not None:

        def shut_job_down(_ev: lk_events.CloseEvent) -> None:
            job.shutdown(reason="end_call")

        session.once("close", shut_job_down)
    session.shutdown(drain=False)
    if job is None:
        return
    if delete_room:
        # the caller's line drops now, not after the session's close
        deletion = job.delete_room()
        deletion.add_done_callback(_log_failed_deletion)


def _log_failed_deletion(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.warning("room_deletion_failed", error=repr(future.exception()))


def _caller_spoke_last(ctx: RunContext[Any]) -> bool:
    for item in reversed(ctx.session.history.items):
        if item.type == "message":
            return item.role == "user"
    return False
