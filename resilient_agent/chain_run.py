"""One agent's chain at work in a session: its notify queues, its setup, its gates, its close.

The session's runtime (:mod:`.runtime`) keeps one :class:`ChainRun` active at a time: that of
the last ``ResilientAgent`` that entered the session. Plain agents and livekit's workflow tasks
the call passes through are served by the chain that handed control to them. A run closes when
the next ``ResilientAgent`` enters (``reason="handoff"``) or when the session ends.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any

from .boundary import Budget, HookTimeoutError, budget_of
from .chain import NOBODY_SETTING_UP, MiddlewareChain
from .dispatch import NotifyQueue
from .errors import MiddlewareNotUsed
from .hooks import HOOKS, Middleware
from .interception import Interceptor
from .requests import SpeechInfo
from .shutdown import ShutdownGate
from .speech_gates import InterruptGate
from .state import CloseReason, MiddlewareContext

__all__ = ["ChainRun"]

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
        self.chain = chain
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
            NotifyQueue(mw, self.ctx, self.chain.report_error)
            for mw in self.chain.middleware
            if _has_notify_hooks(self.chain, mw)
        ]
        self._listening = self._listeners_by_hook()

    def submit(self, hook: str, *args: Any, urgent: bool = False) -> None:
        """Queue ``hook`` for every middleware that listens to it."""
        if self._closed:
            return
        for queue in self._listening.get(hook, ()):
            queue.put(hook, args, urgent=urgent)

    def runs_in_queue(self, task: asyncio.Task[Any] | None) -> bool:
        """Whether ``task`` runs one of this chain's notify hooks."""
        return task is not None and any(q.task is task for q in self._queues)

    async def set_up(self) -> None:
        """Set every middleware up concurrently; one that fails sits the session out.

        Each joins in as soon as its own setup is over. A middleware whose ``setup`` raises or
        runs past its budget is reported by name; the others, and the app, carry on.
        """
        middleware = self.chain.middleware
        setting_up = {id(mw) for mw in middleware}
        self.chain.setting_up = setting_up
        outcomes = await asyncio.gather(
            *(self._set_up(mw, setting_up) for mw in middleware), return_exceptions=True
        )
        if not setting_up and self.chain.setting_up is setting_up:
            self.chain.setting_up = NOBODY_SETTING_UP
        left_out: list[Middleware] = []
        for mw, outcome in zip(middleware, outcomes, strict=True):
            if isinstance(outcome, MiddlewareNotUsed):
                left_out.append(mw)
            elif isinstance(outcome, Exception):
                left_out.append(mw)
                self.chain.report_error(mw, "setup", outcome, "disabled_for_session")
            elif isinstance(outcome, BaseException):
                raise outcome
        for mw in left_out:
            self.ctx.release(mw)
        if left_out:
            self.chain = self.chain.without(left_out)
            for queue in [q for q in self._queues if q.mw in left_out]:
                queue.cancel()
                self._queues.remove(queue)
            self._listening = self._listeners_by_hook()
        self._install_gates()

    def _install_gates(self) -> None:
        if self.chain.handles("decide_shutdown"):
            gate = ShutdownGate(
                self.chain, self.ctx, self._farewell_of, speech_done_at=self._speech_done_at
            )
            try:
                gate.install(self._interceptor)
                self.shutdown_gate = gate
            except Exception as exc:
                self._interceptor.restore_all()
                self.chain.report_error("ShutdownGate", "install", exc, "left_out")
        if self.chain.handles("decide_interrupt"):
            InterruptGate(self.chain, self.ctx).install(self._interceptor)

    def _listeners_by_hook(self) -> dict[str, tuple[NotifyQueue, ...]]:
        by_middleware = {id(queue.mw): queue for queue in self._queues}
        return {
            hook: tuple(by_middleware[id(mw)] for mw in self.chain.listeners(hook))
            for hook, spec in HOOKS.items()
            if spec.kind == "notify" and self.chain.handles(hook)
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
            if not budget.expired:
                raise
            raise budget.overrun(step) from None

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
        for mw in reversed(self.chain.middleware):
            try:
                await self._lifecycle(mw, "aclose", reason)
            except Exception as exc:
                self.chain.report_error(mw, "aclose", exc)
            finally:
                # what its aclose left: the listeners it added, the services it offered
                self.ctx.release(mw)
        if interrupted:
            raise asyncio.CancelledError

    async def _drain_queues(self) -> None:
        """Let queued notify hooks run; a middleware still busy past the bound is cancelled."""
        for queue in self._queues:
            queue.close()
        tasks = {queue.task: queue for queue in self._queues if queue.task is not None}
        if not tasks:
            return
        _done, pending = await asyncio.wait(set(tasks), timeout=_STOP_BOUND_S)
        for task in pending:
            queue = tasks[task]
            queue.cancel()
            hung = HookTimeoutError(f"still running {_STOP_BOUND_S} s into the close")
            self.chain.report_error(queue.mw, queue.running or "notify", hung, "cancelled_at_close")


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
