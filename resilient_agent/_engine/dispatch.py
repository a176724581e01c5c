"""Notify hooks run in one task per middleware, so a hung hook holds up only its own middleware.

Each middleware sees the events it listens to in livekit's order, with "the caller started
speaking" overtaking bookkeeping; middleware no longer wait for each other. Every hook call runs
under the middleware's time budget (:meth:`.Budget.run_notify`); a hook past it is cancelled and
reported, and the middleware goes on with its next event.

A middleware's task exists only while it has hooks to run, and its budget timer only while a
hook is suspended: most hooks return without ever waiting, and an idle middleware then costs no
task, no waiter and no timer (a session is mostly idle between events).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any

from .boundary import Budget, budget_of
from .hooks import Middleware
from .state import MiddlewareContext, Named

__all__ = ["NotifyQueue"]

Reporter = Callable[[Named | str, str, BaseException, str], None]


class NotifyQueue:
    """One middleware's pending notify hooks and the task that runs them while there are any.

    Hooks queued before :meth:`open` (the middleware is still setting up) wait for it. The
    task runs in the context the queue was made in (the session's start), not in that of
    whichever livekit task emitted the event.
    """

    def __init__(self, mw: Middleware, ctx: MiddlewareContext, report: Reporter) -> None:
        self.mw = mw
        self._ctx = ctx
        self._report = report
        self._loop = asyncio.get_running_loop()
        self._context = contextvars.copy_context()
        # one budget for all its hooks, pointed at each task that runs them: a hook that never
        # waits costs it nothing
        self._budget = Budget(budget_of(mw))
        self._name = f"resilient_agent.dispatch.{mw.display_name}"
        # urgent calls first (in their own order), then the others
        self._pending: list[tuple[str, tuple[Any, ...]]] = []
        self._urgent = 0
        self._open = False
        self.running: str | None = None
        """The hook running now, if any."""
        self.task: asyncio.Task[None] | None = None
        """The task running this middleware's hooks, while it has any to run."""

    def put(self, hook: str, args: tuple[Any, ...], *, urgent: bool) -> None:
        """Queue one hook call."""
        if urgent:
            self._pending.insert(self._urgent, (hook, args))
            self._urgent += 1
        else:
            self._pending.append((hook, args))
        if self.task is None and self._open:
            self._start()

    def open(self) -> None:
        """The middleware is set up: run what was queued meanwhile, then keep up."""
        self._open = True
        if self.task is None and self._pending:
            self._start()

    def close(self) -> None:
        """Run what is queued (set up or not), then end; :attr:`task` is what to wait for."""
        self.open()

    def cancel(self) -> None:
        """Drop what is queued and cancel the hook running now."""
        self._pending.clear()
        self._urgent = 0
        if self.task is not None:
            self.task.cancel()

    def _start(self) -> None:
        self.task = self._context.run(self._loop.create_task, self._run(), name=self._name)
        self._budget.task = self.task

    async def _run(self) -> None:
        try:
            while self._pending:
                hook, args = self._pending.pop(0)
                if self._urgent:
                    self._urgent -= 1
                self.running = hook
                await self._budget.run_notify(self.mw, hook, self._ctx, args, self._report)
                self.running = None
        finally:
            self.task = self._budget.task = None  # the budget holds no finished task either
            self.running = None
