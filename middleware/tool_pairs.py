"""Whether every function call of a chat context has its output, and every output its call.

OpenAI's Responses API, Gemini and Anthropic refuse a context with a function call that has no
output, or an output without its call, and every later turn of the call then fails too
(livekit/agents#5092). One definition of that rule, shared by :class:`ContextIntegrity` (which
repairs such a context before it reaches the LLM) and the lab's strict LLM fake (which rejects
it, as the providers do).

livekit's own pair for a tool still running (a flagged call and its placeholder output, ``The
tool call is still in progress.``) is a pair like any other: it is well formed.
"""

from __future__ import annotations

from dataclasses import dataclass

from livekit.agents.llm import ChatContext

__all__ = ["UnpairedToolItems", "malformed_context", "unpaired_tool_items"]


@dataclass(frozen=True)
class UnpairedToolItems:
    """The call ids a provider would reject a context for, sorted.

    Attributes:
        calls_without_output: Function calls with no output in the context.
        outputs_without_call: Function outputs whose call is not in the context.
    """

    calls_without_output: tuple[str, ...] = ()
    outputs_without_call: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        """True when the context is malformed."""
        return bool(self.calls_without_output or self.outputs_without_call)


def unpaired_tool_items(chat_ctx: ChatContext) -> UnpairedToolItems:
    """The function calls of ``chat_ctx`` without their output, and the outputs without a call."""
    calls = {i.call_id for i in chat_ctx.items if i.type == "function_call"}
    outputs = {i.call_id for i in chat_ctx.items if i.type == "function_call_output"}
    return UnpairedToolItems(
        calls_without_output=tuple(sorted(calls - outputs)),
        outputs_without_call=tuple(sorted(outputs - calls)),
    )


def malformed_context(chat_ctx: ChatContext) -> str | None:
    """Why a provider would reject ``chat_ctx``, or None when it is well formed."""
    unpaired = unpaired_tool_items(chat_ctx)
    if unpaired.calls_without_output:
        return f"function call without its output: {', '.join(unpaired.calls_without_output)}"
    if unpaired.outputs_without_call:
        return f"function output without its call: {', '.join(unpaired.outputs_without_call)}"
    return None
