"""A middleware that fails once in each hook it has: the lab's fault injection for the chain.

Placed first in a chain, it raises in the first call of every hook it overrides: a stray
``CancelledError`` (a future someone else cancelled) in the user turn, the tool call and the
caller's transcript, an exception in the inference. Each later call passes through. A call
with it must go as it goes without it: the chain's boundaries bypass a failing hook, and no
turn, first or next, is lost to it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from livekit.agents.voice import events as lk_events

from .._engine.hooks import (
    InferenceNext,
    Middleware,
    ToolCallNext,
    UserTurnNext,
)
from .._engine.requests import InferenceRequest, ToolCall, UserTurn
from .._engine.state import MiddlewareContext

__all__ = ["HookFaults", "InjectedFault"]


class InjectedFault(Exception):
    """The exception :class:`HookFaults` raises."""


class HookFaults(Middleware):
    """Fails once in each of its hooks (see the module docstring).

    Attributes:
        injected: The hooks that have failed so far, in order.
    """

    position = "first"
    hook_budget_s = 1.0

    def __init__(self) -> None:
        self.injected: list[str] = []

    async def _fail_once(self, hook: str, *, cancel: bool) -> None:
        if hook in self.injected:
            return
        self.injected.append(hook)
        if not cancel:
            raise InjectedFault(f"injected into {hook}")
        stray: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        stray.cancel()
        await stray

    async def on_user_transcript(
        self, ctx: MiddlewareContext, ev: lk_events.UserInputTranscribedEvent
    ) -> None:
        """Fail the first transcript's hook with a stray cancellation."""
        await self._fail_once("on_user_transcript", cancel=True)

    async def wrap_user_turn(
        self, ctx: MiddlewareContext, turn: UserTurn, call_next: UserTurnNext
    ) -> None:
        """Fail the first user turn with a stray cancellation, before ``call_next``."""
        await self._fail_once("wrap_user_turn", cancel=True)
        await call_next(turn)

    async def wrap_tool_call(
        self, ctx: MiddlewareContext, call: ToolCall, call_next: ToolCallNext
    ) -> Any:
        """Fail the first tool call with a stray cancellation, before ``call_next``."""
        await self._fail_once("wrap_tool_call", cancel=True)
        return await call_next(call)

    async def wrap_llm_request(
        self, ctx: MiddlewareContext, request: InferenceRequest, call_next: InferenceNext
    ) -> Any:
        """Fail the first inference with an exception, before ``call_next``."""
        await self._fail_once("wrap_llm_request", cancel=False)
        return await call_next(request)
