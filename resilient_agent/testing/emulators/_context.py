"""Wire requests back into a livekit ``ChatContext``, for the scripted LLM to answer.

The scripted LLM (:class:`~resilient_agent.testing.llm.ScriptedLLM`) chooses its answer from a
chat context. An LLM emulator receives the provider's wire shape instead, so it rebuilds the
context the request describes: what the provider's model would read.
"""

from __future__ import annotations

import json
from typing import Any

from livekit.agents.llm import ChatContext, FunctionCall, FunctionCallOutput

__all__ = ["from_gemini", "from_openai", "from_openai_realtime"]

# livekit's wrapper for instructions given in the middle of a conversation, on providers (Gemini)
# that take a single system text: the model reads them as instructions, and so does the emulator
_INLINE_OPEN = "<instructions>\n"
_INLINE_CLOSE = "\n</instructions>"
# livekit closes a Gemini context that does not end in a user turn with this one
_DUMMY_USER_TEXT = "."


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def from_openai(messages: list[dict[str, Any]]) -> ChatContext:
    """The context of a chat completions request's ``messages``."""
    ctx = ChatContext.empty()
    names: dict[str, str] = {}
    for message in messages:
        role = message.get("role")
        text = _text_of(message.get("content"))
        if role in ("system", "developer"):
            ctx.add_message(role="system", content=text)
        elif role == "user":
            ctx.add_message(role="user", content=text)
        elif role == "assistant":
            if text:
                ctx.add_message(role="assistant", content=text)
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                names[call["id"]] = function.get("name", "")
                ctx.items.append(
                    FunctionCall(
                        call_id=call["id"],
                        name=function.get("name", ""),
                        arguments=function.get("arguments", "{}"),
                    )
                )
        elif role == "tool":
            call_id = message.get("tool_call_id", "")
            ctx.items.append(
                FunctionCallOutput(
                    call_id=call_id,
                    name=names.get(call_id, ""),
                    output=text,
                    is_error=False,
                )
            )
    return ctx


def _camel_or_snake(part: dict[str, Any], camel: str, snake: str) -> Any:
    return part.get(camel, part.get(snake))


def from_gemini(body: dict[str, Any]) -> ChatContext:
    """The context of a ``generateContent`` request body (camelCase or snake_case fields)."""
    ctx = ChatContext.empty()
    system = _camel_or_snake(body, "systemInstruction", "system_instruction")
    if system:
        parts = system.get("parts", []) if isinstance(system, dict) else []
        ctx.add_message(role="system", content="\n".join(p.get("text", "") for p in parts))
    contents = body.get("contents", [])
    for position, content in enumerate(contents):
        role = content.get("role", "user")
        for part in content.get("parts", []):
            text = part.get("text")
            call = _camel_or_snake(part, "functionCall", "function_call")
            response = _camel_or_snake(part, "functionResponse", "function_response")
            if text is not None:
                last = position == len(contents) - 1
                if role == "user" and last and text == _DUMMY_USER_TEXT:
                    continue
                if (
                    role == "user"
                    and text.startswith(_INLINE_OPEN)
                    and text.endswith(_INLINE_CLOSE)
                ):
                    inner = text[len(_INLINE_OPEN) : -len(_INLINE_CLOSE)]
                    ctx.add_message(role="system", content=inner)
                else:
                    ctx.add_message(role="assistant" if role == "model" else "user", content=text)
            elif call is not None:
                ctx.items.append(
                    FunctionCall(
                        call_id=call.get("id") or call.get("name", ""),
                        name=call.get("name", ""),
                        arguments=json.dumps(call.get("args") or {}),
                    )
                )
            elif response is not None:
                payload = response.get("response") or {}
                is_error = "error" in payload
                ctx.items.append(
                    FunctionCallOutput(
                        call_id=response.get("id") or response.get("name", ""),
                        name=response.get("name", ""),
                        output=str(payload.get("error" if is_error else "output", "")),
                        is_error=is_error,
                    )
                )
    return ctx


def _realtime_text(item: dict[str, Any]) -> str:
    parts = item.get("content") or []
    texts = [p.get("text") or p.get("transcript") or "" for p in parts if isinstance(p, dict)]
    return "".join(t for t in texts if isinstance(t, str))


def from_openai_realtime(instructions: str, items: list[dict[str, Any]]) -> ChatContext:
    """The context an OpenAI Realtime response is generated from: instructions, then items."""
    ctx = ChatContext.empty()
    if instructions:
        ctx.add_message(role="system", content=instructions)
    names: dict[str, str] = {}
    for item in items:
        kind = item.get("type")
        if kind == "message":
            role = item.get("role")
            text = _realtime_text(item)
            if role in ("system", "developer"):
                ctx.add_message(role="system", content=text)
            elif role in ("user", "assistant"):
                ctx.add_message(role=role, content=text)
        elif kind == "function_call":
            names[str(item.get("call_id"))] = str(item.get("name", ""))
            ctx.items.append(
                FunctionCall(
                    call_id=str(item.get("call_id", "")),
                    name=str(item.get("name", "")),
                    arguments=str(item.get("arguments") or "{}"),
                )
            )
        elif kind == "function_call_output":
            call_id = str(item.get("call_id", ""))
            ctx.items.append(
                FunctionCallOutput(
                    call_id=call_id,
                    name=names.get(call_id, ""),
                    output=str(item.get("output", "")),
                    is_error=False,
                )
            )
    return ctx
