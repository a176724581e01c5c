"""Tool names in middleware options, checked against the agent's tools when a session starts.

A typo in a per-tool option (``ToolGuard(policies={"trnasfer_call": ...})``) would silently
apply to no tool. It cannot be refused at construction, since tools can be added later
(``update_tools``, a handoff's agent), so each unknown name is warned about, with the closest
tool name, and listed in ``call_report.unknown_tools``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from livekit.agents import llm

from .events import UnknownToolEvent
from .hooks import Middleware
from .options import close_match

__all__ = ["fix_for", "known_tool_names", "unknown_tools"]

OnError = Callable[[Middleware, str, BaseException], None]


def known_tool_names(tools: Sequence[llm.Tool | llm.Toolset]) -> set[str]:
    """The names of the function tools in ``tools``, toolsets' included."""
    return set(llm.ToolContext(tools).function_tools)


def unknown_tools(
    middleware: Sequence[Middleware], known: Collection[str], on_error: OnError
) -> list[UnknownToolEvent]:
    """One event per tool name an option mentions that is not in ``known``.

    Args:
        middleware: The session's chain.
        known: The tool names the agent and session have.
        on_error: Told when a middleware's ``option_tool_names`` raises; it is then skipped.
    """
    found: list[UnknownToolEvent] = []
    for mw in middleware:
        try:
            named = {option: sorted(tools) for option, tools in mw.option_tool_names().items()}
        except Exception as exc:
            on_error(mw, "option_tool_names", exc)
            continue
        for option, tools in named.items():
            found.extend(
                UnknownToolEvent(
                    middleware=mw.display_name,
                    option=option,
                    tool=tool,
                    did_you_mean=close_match(tool, known),
                )
                for tool in tools
                if tool not in known
            )
    return found


def fix_for(event: UnknownToolEvent) -> str:
    """What to change, for the warning logged with ``event``."""
    hint = f"did you mean {event.did_you_mean!r}? " if event.did_you_mean else ""
    return f"{hint}correct the name in {event.middleware}({event.option}=...), or add the tool"
