"""Notify hooks run in one task per middleware, so a hung hook holds up only its own middleware.

Each middleware sees the events it listens to in livekit's order, with "the caller started
speaking" overtaking bookkeeping; middleware no longer wait for each other. Every hook call runs
under the middleware's time budget (see :mod:`.boundary`); a hook past it is cancelled and
reported, and the middleware goes on with its next event.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from .boundary import Budget, HookTimeoutError, budget_of
from .hooks import Middleware
from .state import MiddlewareContext, Named

__all__ = ["NotifyQueue", "run_notify"]

Reporter = Callable[[Named | str, str, BaseException, str], None]


async def run_notify(
    mw: Middleware,
    hook: str,
    handler: Callable[..., Any],
    ctx: MiddlewareContext,
    args: Sequence[Any],
    report: Reporter,
) -> None:
    """Run one notify hook under its budget; a failure is reported, never raised."""
    budget = Budget(budget_of(mw))
    try:
        with budget:
            await handler(ctx, *args)
    except asyncio.CancelledError:
        if not budget.expired:
            raise
        budget.absorb()
        report(mw, hook, HookTimeoutError(f"{hook} ran past {budget.seconds} s"), "cancelled")
    except Exception as exc:
        report(mw, hook, exc, "continued_without_it")
    else:
        if budget.expired:
            budget.absorb()
            report(mw, hook, HookTimeoutError(f"{hook} ran past {budget.seconds} s"), "cancelled")


class NotifyQueue:
    """One middleware's pending notify hooks and the task that runs them."""

    def __init__(self, mw: Middleware, ctx: MiddlewareContext, report: Reporter) -> None:
        self.mw = mw
        self._ctx = ctx
        self._report = report
        self._urgent: deque[tuple[str, tuple[Any, ...]]] = deque()
        self._normal: deque[tuple[str, tuple[Any, ...]]] = deque()
        self._wake = asyncio.Event()
        self._open = asyncio.Event()
        self._closed = False
        self.running: str | None = None
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"resilient_agent.dispatch.{mw.display_name}"
        )

    def put(self, hook: str, args: tuple[Any, ...], *, urgent: bool) -> None:
        """Queue one hook call."""
        (self._urgent if urgent else self._normal).append((hook, args))
        self._wake.set()

    def open(self) -> None:
        """The middleware is set up: run what was queued meanwhile, then keep up."""
        self._open.set()

    def close(self) -> None:
        """Run what is queued, then end."""
        self._closed = True
        self._open.set()
        self._wake.set()

    async def _run(self) -> None:
        await self._open.wait()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._urgent or self._normal:
                hook, args = (self._urgent or self._normal).popleft()
                self.running = hook
                await run_notify(
                    self.mw, hook, getattr(self.mw, hook), self._ctx, args, self._report
                )
                self.running = None
            if self._closed:
                return
