"""``SpeakingGuard``: hold back configured tools while the caller is speaking."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from resilient_agent import (
    Middleware,
    MiddlewareContext,
    OptionChecker,
    ToolCall,
    ToolCallNext,
)

__all__ = ["DEFAULT_GUARDED_TOOLS", "REFUSAL", "SpeakingGuard"]

DEFAULT_GUARDED_TOOLS = ("end_call", "hang_up", "transfer_call")
"""Tools that act on the call itself: running one on a stale decision cannot be taken back."""

REFUSAL = (
    "Not done: the caller started speaking before {tool} ran. Listen to what they say, "
    "then call {tool} again if it is still wanted."
)
"""What the LLM receives instead of the tool's result; ``{tool}`` is the tool's name."""


class SpeakingGuard(Middleware):
    """Refuse the guarded tools while the caller is speaking; the LLM hears why and can retry.

    The LLM chose the tool from what the caller had said so far. If the caller is talking again
    by the time the tool is about to run ("goodbye... oh wait, one more thing"), the decision
    may be stale, so the call is not made and the LLM is told to listen first. Other tools run
    as usual.

    Built with no options when loaded as a plugin; to guard other tools, pass
    ``MiddlewareSpec(SpeakingGuard, tools=[...])`` in ``middleware=[...]`` instead.

    Args:
        tools: Names of the tools to hold back, as the LLM sees them; None guards
            ``DEFAULT_GUARDED_TOOLS``. Names the agent does not have are warned about when the
            session starts.
        refusal: The result the LLM receives instead; ``{tool}`` is replaced by the tool's name.

    Raises:
        OptionError: ``tools`` is not a list of names (a single string, say), or ``refusal``
            is not a string that renders with ``{tool}`` (``OptionError`` is a ``ValueError``).
    """

    name = "speaking_guard"
    # outermost: nothing else in the chain does work for a call that is refused
    position = "first"

    def __init__(self, *, tools: Collection[str] | None = None, refusal: str = REFUSAL) -> None:
        # checked here, so a bad value fails when the agent is built and never during a call
        check = OptionChecker(self.display_name)
        named = None
        if tools is not None:
            named = check.sequence("tools", tools, check.text, unordered=True)
        self.tools = frozenset(DEFAULT_GUARDED_TOOLS if named is None else named)
        # only names the app chose are checked against its tools: the defaults are a wide net
        self._chosen_tools = frozenset(named or ())
        self.refusal = check.format_string(
            "refusal", refusal, {"tool": "transfer_call"}, example="Not done yet: {tool}."
        )

    def option_tool_names(self) -> Mapping[str, Collection[str]]:
        """The tool names given as ``tools``, checked against the agent's when a session starts."""
        return {"tools": self._chosen_tools}

    async def wrap_tool_call(
        self, ctx: MiddlewareContext, call: ToolCall, call_next: ToolCallNext
    ) -> Any:
        """Run the tool, unless it is guarded and the caller is speaking right now."""
        if call.name not in self.tools or ctx.state.user_state != "speaking":
            return await call_next(call)
        ctx.race_handled(
            self,
            "tool_while_caller_speaking",
            "refused_tool",
            details={"tool": call.name, "call_id": call.call_id},
        )
        return self.refusal.format(tool=call.name)
