"""A ready end-call function tool that hangs up only once the farewell was heard."""

from __future__ import annotations

import re
from typing import Any

from livekit.agents import RunContext, function_tool
from livekit.agents.llm import FunctionTool, ToolError

from .options import OptionChecker

__all__ = ["end_call_tool"]

DEFAULT_FAREWELL = "Thank you for calling. Goodbye!"
# what LLM providers accept as a function name (OpenAI's rule; the others' are looser or equal)
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def end_call_tool(
    *,
    farewell: str = DEFAULT_FAREWELL,
    delete_room: bool = False,
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
        delete_room: Delete the room after shutting down (SIP calls need it to hang up).
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
        from .agent import ResilientAgent

        agent = ctx.session.current_agent
        if not isinstance(agent, ResilientAgent):
            raise ToolError("end_call_tool only works on a ResilientAgent")
        if require_caller_request and not _caller_spoke_last(ctx):
            return "The caller did not ask to end the call. Do not hang up; keep helping."
        agent.hang_up_after_farewell(farewell, delete_room=delete_room)
        return None

    return end_call


def _caller_spoke_last(ctx: RunContext[Any]) -> bool:
    for item in reversed(ctx.session.history.items):
        if item.type == "message":
            return item.role == "user"
    return False
