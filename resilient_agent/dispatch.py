"""Notify hooks run in one task per middleware, so a hung hook holds up only its own middleware.

Each middleware sees the events it listens to in livekit's order, with "the caller started
speaking" overtaking bookkeeping; middleware no longer wait for each other. Every hook call runs
under the middleware's time budget (see :mod:`.boundary`); a hook past it is cancelled and
reported, and the middleware goes on with its next event.

A middleware's task exists only while it has hooks to run, and its budget timer only while a
hook is suspended: most hooks return without ever waiting, and an idle middleware then costs no
task, no waiter and no timer (a session is mostly idle between events).
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Callable, Coroutine, Generator, Sequence
from types import CoroutineType
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
        self._budget_s = budget_of(mw)
        self._name = f"resilient_agent.dispatch.{mw.display_name}"
        # urgent calls first (in their own order), then the others
        self._pending: list[tuple[str, tuple[Any, ...]]] = []
        self._urgent = 0
        self._open = False
        self._call = 0
        self._expired_call = 0
        self._deadline: asyncio.TimerHandle | None = None
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

    async def _run(self) -> None:
        try:
            while self._pending:
                hook, args = self._pending.pop(0)
                if self._urgent:
                    self._urgent -= 1
                await self._run_hook(hook, args)
        finally:
            self.task = None
            self.running = None
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

    async def _run_hook(self, hook: str, args: tuple[Any, ...]) -> None:
        """Run one hook; a failure or a hang past the budget is reported, never raised."""
        self._call += 1
        call = self._call
        self.running = hook
        try:
            hook_call = getattr(self.mw, hook)(self._ctx, *args)
            if type(hook_call) is CoroutineType:
                # its first step runs here, as an await would run it; most hooks end in it
                try:
                    waits_on = hook_call.send(None)
                except StopIteration:
                    pass
                else:
                    self._arm(call)  # the hook waits for something: its budget counts from now
                    await _Resumed(hook_call, waits_on)
            else:
                self._arm(call)  # an awaitable of another kind: watched from the start
                await hook_call
        except asyncio.CancelledError:
            if self._expired_call != call:
                raise
            self._timed_out(hook)
        except Exception as exc:
            self._report(self.mw, hook, exc, "continued_without_it")
        else:
            if self._expired_call == call:
                self._timed_out(hook)  # it swallowed the cancellation, still ran past its budget
        finally:
            self.running = None
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

    def _arm(self, call: int) -> None:
        self._deadline = self._loop.call_later(self._budget_s, self._expire, call)

    def _expire(self, call: int) -> None:
        if call == self._call and self.running is not None and self.task is not None:
            self._expired_call = call
            self.task.cancel()

    def _timed_out(self, hook: str) -> None:
        if self.task is not None and sys.version_info >= (3, 11):
            self.task.uncancel()  # the cancellation was the budget's: the task goes on
        hung = HookTimeoutError(f"{hook} ran past {self._budget_s} s")
        self._report(self.mw, hook, hung, "cancelled")


class _Resumed:
    """Awaits the rest of a hook coroutine whose first step already ran (and waits on ``first``).

    What ``await`` does with a coroutine, from its second step on: each value it yields goes up
    to the task, and what the task sends or throws in (a wake-up, a cancellation) goes down.
    """

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, waits_on = self._coro, self._first
        while True:
            try:
                sent = yield waits_on
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                try:
                    waits_on = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    waits_on = coro.send(sent)
                except StopIteration as done:
                    return done.value
