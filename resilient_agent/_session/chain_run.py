"""One agent's chain at work in a session: the one way in and out of its middleware.

The session's runtime (:mod:`.runtime`) keeps one :class:`ChainRun` active at a time: that of
the last ``ResilientAgent`` that entered the session. Plain agents and livekit's workflow tasks
the call passes through are served by the chain that handed control to them. A run closes when
the next ``ResilientAgent`` enters (``reason="handoff"``) or when the session ends.

Everything the library asks of a chain goes through its run, and nothing else calls a
:class:`~.chain.MiddlewareChain` method (a test holds the library to it): notify hooks are
queued (:meth:`ChainRun.submit`), decide hooks answered (:meth:`ChainRun.decide`), wrap hooks
wrapped around livekit's step (:meth:`ChainRun.user_turn`, :meth:`ChainRun.inference`,
:meth:`ChainRun.tool_call`), each with the session's context.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from livekit.agents.llm import ChatContext, ChatMessage

from .._engine.boundary import Budget, HookTimeoutError, budget_of, stray_cancellation
from .._engine.chain import NOBODY_SETTING_UP, MiddlewareChain
from .._engine.dispatch import NotifyQueue, deliver
from .._engine.errors import MiddlewareNotUsed
from .._engine.hooks import HOOKS, Middleware
from .._engine.requests import InferenceRequest, SpeechInfo, ToolCall, UserTurn
from .._engine.state import CloseReason, MiddlewareContext, Named
from .._livekit.compat import inference_speech
from .._livekit.interception import Interceptor
from .._livekit.shutdown import ShutdownGate
from .._livekit.speech_gates import InterruptGate, ProtectionGate

__all__ = ["AppLlmNode", "AppUserTurnHook", "ChainRun"]

AppUserTurnHook = Callable[[ChatContext, ChatMessage], Awaitable[None]]
"""An agent's ``on_user_turn_completed`` (the app's own, or livekit's)."""
AppLlmNode = Callable[[ChatContext, list[Any], Any], Any]
"""An agent's ``llm_node`` (the app's own, or livekit's)."""

# How long a close waits for queued notify hooks.
_STOP_BOUND_S = 5.0


class ChainRun:
    """Dispatches the session's events to one chain, from its setup to its close.

    Args:
        chain: The chain (one session's instances).
        ctx: The session's context.
        farewell_of: The last speech a tool created in this session.
        speech_done_at: When a speech of this session finished, by id.
    """

    def __init__(
        self,
        chain: MiddlewareChain,
        ctx: MiddlewareContext,
        *,
        farewell_of: Callable[[str | None], SpeechInfo | None],
        speech_done_at: Callable[[str], float | None],
    ) -> None:
        self._chain = chain
        self.ctx = ctx
        self._farewell_of = farewell_of
        self._speech_done_at = speech_done_at
        self._queues: list[NotifyQueue] = []
        self._listening: dict[str, tuple[NotifyQueue, ...]] = {}
        self._interceptor = Interceptor()
        self.shutdown_gate: ShutdownGate | None = None
        self._closed = False

    def start_queues(self) -> None:
        """Queue events for each middleware from now on (they run once its setup is over)."""
        self._queues = [
            NotifyQueue(mw, self.ctx, self._chain.report_error)
            for mw in self._chain.middleware
            if _has_notify_hooks(self._chain, mw)
        ]
        self._listening = self._listeners_by_hook()

    def submit(self, hook: str, *args: Any, urgent: bool = False) -> None:
        """Queue ``hook`` for every middleware that listens to it."""
        if self._closed:
            return
        queues = self._listening.get(hook)
        if queues:
            deliver(queues, hook, args, urgent)

    def runs_in_queue(self, task: asyncio.Task[Any] | None) -> bool:
        """Whether ``task`` runs one of this chain's notify hooks."""
        return task is not None and any(q.task is task for q in self._queues)

    # -- the chain's hooks, each with the session's context -------------------------------------
    @property
    def middleware(self) -> tuple[Middleware, ...]:
        """The chain's middleware in dispatch order (those left out at setup gone)."""
        return self._chain.middleware

    def handles(self, hook: str) -> bool:
        """Whether any middleware of the chain overrides ``hook``."""
        return self._chain.handles(hook)

    def decide(self, hook: str, request: Any) -> Any:
        """The chain's answer to a decide hook: the first that is not None, or None."""
        return self._chain.decide(hook, self.ctx, request)

    def report_error(
        self, mw: Named | str, hook: str, exc: BaseException, action: str = "continued_without_it"
    ) -> None:
        """Report a failing piece of this chain, named."""
        self._chain.report_error(mw, hook, exc, action)

    async def user_turn(
        self, app_hook: AppUserTurnHook, turn_ctx: ChatContext, new_message: ChatMessage
    ) -> None:
        """Run ``app_hook`` (the agent's ``on_user_turn_completed``) inside ``wrap_user_turn``."""
        if not self._chain.handles("wrap_user_turn"):
            await app_hook(turn_ctx, new_message)
            return
        original_text = new_message.text_content or ""

        async def run_app_hook(turn: UserTurn) -> None:
            if turn.text != original_text:
                new_message.content = [turn.text]
            await app_hook(turn.turn_ctx, new_message)

        turn = UserTurn(text=original_text, message=new_message, turn_ctx=turn_ctx)
        await self._chain.wrap_user_turn(self.ctx, turn, run_app_hook)

    def inference(
        self, app_node: AppLlmNode, chat_ctx: ChatContext, tools: list[Any], model_settings: Any
    ) -> Any:
        """Run ``app_node`` (the agent's ``llm_node``) inside ``wrap_llm_request``."""
        if not self._chain.handles("wrap_llm_request"):
            return app_node(chat_ctx, tools, model_settings)

        async def run_app_node(request: InferenceRequest) -> Any:
            # livekit awaits a coroutine result, then streams whatever the app's node returned
            return app_node(request.chat_ctx, request.tools, request.model_settings)

        request = InferenceRequest(
            chat_ctx=chat_ctx, tools=tools, model_settings=model_settings, speech=inference_speech()
        )
        return self._chain.wrap_llm_request(self.ctx, request, run_app_node)

    async def tool_call(
        self, call: ToolCall, run_body: Callable[[ToolCall], Awaitable[Any]]
    ) -> Any:
        """Run one tool call inside ``wrap_tool_call``, its speech protection asking the chain."""
        per_call = Interceptor()
        if call.run_context is not None and (
            self._chain.handles("decide_protection") or self._chain.handles("decide_resume")
        ):
            ProtectionGate(self, call.run_context, call.name).install(per_call)
        try:
            return await self._chain.wrap_tool_call(self.ctx, call, run_body)
        finally:
            per_call.restore_all()

    # -- setup and close -----------------------------------------------------------------------
    async def set_up(self) -> None:
        """Set every middleware up concurrently; one that fails sits the session out.

        Each joins in as soon as its own setup is over. A middleware whose ``setup`` raises or
        runs past its budget is reported by name; the others, and the app, carry on.
        """
        middleware = self._chain.middleware
        setting_up = {id(mw) for mw in middleware}
        self._chain.setting_up = setting_up
        outcomes = await asyncio.gather(
            *(self._set_up(mw, setting_up) for mw in middleware), return_exceptions=True
        )
        if not setting_up and self._chain.setting_up is setting_up:
            self._chain.setting_up = NOBODY_SETTING_UP
        left_out: list[Middleware] = []
        for mw, outcome in zip(middleware, outcomes, strict=True):
            if isinstance(outcome, MiddlewareNotUsed):
                left_out.append(mw)
            elif isinstance(outcome, Exception):
                left_out.append(mw)
                self._chain.report_error(mw, "setup", outcome, "disabled_for_session")
            elif isinstance(outcome, BaseException):
                raise outcome
        for mw in left_out:
            self.ctx.release(mw)
        if left_out:
            self._chain = self._chain.without(left_out)
            for queue in [q for q in self._queues if q.mw in left_out]:
                queue.cancel()
                self._queues.remove(queue)
            self._listening = self._listeners_by_hook()
        self._install_gates()

    def _install_gates(self) -> None:
        if self._chain.handles("decide_shutdown"):
            gate = ShutdownGate(self, self._farewell_of, speech_done_at=self._speech_done_at)
            try:
                gate.install(self._interceptor)
                self.shutdown_gate = gate
            except Exception as exc:
                self._interceptor.restore_all()
                self._chain.report_error("ShutdownGate", "install", exc, "left_out")
        if self._chain.handles("decide_interrupt"):
            InterruptGate(self).install(self._interceptor)

    def _listeners_by_hook(self) -> dict[str, tuple[NotifyQueue, ...]]:
        by_middleware = {id(queue.mw): queue for queue in self._queues}
        return {
            hook: tuple(by_middleware[id(mw)] for mw in self._chain.listeners(hook))
            for hook, spec in HOOKS.items()
            if spec.kind == "notify" and self._chain.handles(hook)
        }

    async def _set_up(self, mw: Middleware, setting_up: set[int]) -> None:
        await self._lifecycle(mw, "setup", None)
        setting_up.discard(id(mw))
        for queue in self._queues:
            if queue.mw is mw:
                queue.open()

    async def _lifecycle(self, mw: Middleware, step: str, reason: CloseReason | None) -> None:
        """Run ``setup`` or ``aclose`` under the middleware's time budget."""
        budget = Budget(budget_of(mw))
        try:
            with budget:
                if step == "setup":
                    await mw.setup(self.ctx)
                elif reason is not None and _aclose_takes_reason(type(mw)):
                    await mw.aclose(self.ctx, reason)
                else:
                    await mw.aclose()  # type: ignore[call-arg]
        except asyncio.CancelledError:
            if budget.expired:
                raise budget.overrun(step) from None
            stray = stray_cancellation(step)
            if stray is None:
                raise
            raise stray from None

    def remove_gates(self) -> None:
        """Put livekit's methods back (the chain no longer decides for the session)."""
        self._interceptor.restore_all()

    async def close(self, reason: CloseReason) -> None:
        """Stop taking events, let queued hooks run, and close the middleware in reverse order.

        Raises:
            asyncio.CancelledError: Whoever awaited the close gave up waiting; the middleware
                were still closed.
        """
        if self._closed:
            return
        self._closed = True
        self.remove_gates()
        interrupted = False
        try:
            await self._drain_queues()
        except asyncio.CancelledError:
            interrupted = True
            for queue in self._queues:
                queue.cancel()
        for mw in reversed(self._chain.middleware):
            try:
                await self._lifecycle(mw, "aclose", reason)
            except Exception as exc:
                self._chain.report_error(mw, "aclose", exc)
            finally:
                # what its aclose left: the listeners it added, the services it offered
                self.ctx.release(mw)
        if interrupted:
            raise asyncio.CancelledError

    async def _drain_queues(self) -> None:
        """Let queued notify hooks run; a middleware still busy past the bound is cancelled."""
        for queue in self._queues:
            queue.close()
        busy = {queue.settled(): queue for queue in self._queues if queue.busy}
        if not busy:
            return
        _done, pending = await asyncio.wait(set(busy), timeout=_STOP_BOUND_S)
        for waited in pending:
            queue = busy[waited]
            queue.cancel()
            hung = HookTimeoutError(f"still running {_STOP_BOUND_S} s into the close")
            self._chain.report_error(
                queue.mw, queue.running or "notify", hung, "cancelled_at_close"
            )


def _has_notify_hooks(chain: MiddlewareChain, mw: Middleware) -> bool:
    return any(
        spec.kind == "notify" and mw in chain.listeners(hook) for hook, spec in HOOKS.items()
    )


def _aclose_takes_reason(cls: type[Middleware]) -> bool:
    """Whether ``cls.aclose`` takes ``(ctx, reason)``; the first form of the hook took none."""
    return _takes_two_arguments(cls.aclose)


@functools.cache
def _takes_two_arguments(method: Callable[..., Any]) -> bool:
    parameters = list(inspect.signature(method).parameters.values())[1:]
    return len(parameters) >= 2 or any(
        p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters
    )
