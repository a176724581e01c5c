"""Notify hooks run in one task per middleware, so a hung hook holds up only its own middleware.

Each middleware sees the events it listens to in livekit's order, with "the caller started
speaking" overtaking bookkeeping; middleware no longer wait for each other. Every hook call runs
under the middleware's time budget (:meth:`.Budget.run_notify`); a hook past it is cancelled and
reported, and the middleware goes on with its next event.

A middleware's task exists only while it has hooks to run, and its budget timer only while a
hook is suspended: most hooks return without ever waiting, and an idle middleware then costs no
task, no waiter and no timer (a session is mostly idle between events).

A middleware whose notify hooks are all marked :func:`~.hooks.never_waits` needs no task at all.
The queues an event starts are started together (:func:`deliver`): those of such middleware in one
callback of the loop, scheduled exactly where their tasks' first steps would have been (those
steps were adjacent in the loop's ready queue: nothing runs between them), each running what it
holds in a copy of the same context, in the same order. So an event costs one loop callback
instead of one task per middleware that hears it. Should a marked hook wait after all, a task
takes it over from there.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from types import CoroutineType
from typing import Any

from .boundary import Budget, Resumed, StrayCancellationError, budget_of
from .hooks import HOOKS, Middleware, runs_without_a_task
from .state import MiddlewareContext, Named

__all__ = ["NotifyQueue", "deliver", "start"]

Reporter = Callable[[Named | str, str, BaseException, str], None]

# what a hook's first step gives back when the hook returned (it did not wait)
_ENDED: Any = object()


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
        """The task running this middleware's hooks, while it has any that may wait."""
        # every notify hook it has never waits: it runs them in a loop callback, with no task
        self.plain = all(
            runs_without_a_task(mw, hook)
            for hook, spec in HOOKS.items()
            if spec.kind == "notify" and _overrides(mw, hook)
        )
        # the batch whose callback runs this queue next (checked, so a cancelled one does not)
        self._scheduled: object | None = None
        self._settled: asyncio.Future[None] | None = None
        self.idle = False
        """Open, with no task and no callback to come: a hook given to it must start it."""

    @property
    def busy(self) -> bool:
        """Whether hooks are queued or running (in a callback to come, or in :attr:`task`)."""
        return self.task is not None or self._scheduled is not None

    def settled(self) -> asyncio.Future[Any]:
        """What to wait for until the queue has run what it holds (while :attr:`busy`)."""
        if self._scheduled is None and self.task is not None:
            return self.task
        if self._settled is None:
            self._settled = self._loop.create_future()
        return self._settled

    def put(self, hook: str, args: tuple[Any, ...], *, urgent: bool) -> None:
        """Queue one hook call, and start the queue if it was idle."""
        if self.add(hook, args, urgent=urgent):
            start((self,))

    def add(self, hook: str, args: tuple[Any, ...], *, urgent: bool) -> bool:
        """Queue one hook call without starting the queue.

        Returns:
            Whether the queue must be started (:func:`start`): it was idle and is open.
        """
        if urgent:
            self._pending.insert(self._urgent, (hook, args))
            self._urgent += 1
        else:
            self._pending.append((hook, args))
        return self.idle

    def open(self) -> None:
        """The middleware is set up: run what was queued meanwhile, then keep up."""
        self._open = True
        if self.task is None and self._scheduled is None:
            self.idle = True
            if self._pending:
                start((self,))

    def close(self) -> None:
        """Run what is queued (set up or not), then end; wait for :meth:`settled` if busy."""
        self.open()

    def cancel(self) -> None:
        """Drop what is queued and cancel the hook running now."""
        self._pending.clear()
        self._urgent = 0
        self._scheduled = None
        if self.task is not None:
            self.task.cancel()
        else:
            self.idle = self._open
            self._now_settled()

    def _start_task(
        self, waiting: tuple[str, Awaitable[Any]] | None = None, *, from_callback: bool = False
    ) -> None:
        self.idle = False
        run = self._run(waiting)
        # from the callback: in its context, so the hooks of one run share one context, as in
        # a task
        self.task = (
            self._loop.create_task(run, name=self._name)
            if from_callback
            else self._context.run(self._loop.create_task, run, name=self._name)
        )
        self._budget.task = self.task

    def _take(self) -> tuple[str, tuple[Any, ...]]:
        call = self._pending.pop(0)
        if self._urgent:
            self._urgent -= 1
        return call

    def _run_plain(self, batch: object) -> None:
        """Run what the queue holds, in the callback of ``batch`` (:func:`start`)."""
        if self._scheduled is not batch:
            return  # cancelled meanwhile
        self._scheduled = None
        self.idle = True
        pending, mw, ctx = self._pending, self.mw, self._ctx
        # no ``running`` to keep: nothing else runs until each of these hooks has returned
        while pending:
            hook, args = pending.pop(0)
            if self._urgent:
                self._urgent -= 1
            try:
                hook_call = getattr(mw, hook)(ctx, *args)
                if type(hook_call) is CoroutineType:
                    # its first step; a hook that returns ends it without raising StopIteration
                    waits_on = next(hook_call.__await__(), _ENDED)
                    if waits_on is _ENDED:
                        continue  # as marked: it ended without waiting
                else:
                    waits_on = hook_call.send(None)
            except StopIteration:
                continue
            except asyncio.CancelledError:
                stray = StrayCancellationError(f"{hook} raised CancelledError outside a task")
                self._report(mw, hook, stray, "continued_without_it")
                continue
            except Exception as exc:
                self._report(mw, hook, exc, "continued_without_it")
                continue
            # it waits after all: a task awaits the rest, under the budget from now on
            self._start_task((hook, Resumed(hook_call, waits_on)), from_callback=True)
            self._budget.count_from_now()
            return
        if self._settled is not None:
            self._now_settled()

    def _now_settled(self) -> None:
        settled, self._settled = self._settled, None
        if settled is not None and not settled.done():
            settled.set_result(None)

    async def _run(self, waiting: tuple[str, Awaitable[Any]] | None) -> None:
        try:
            if waiting is not None:
                hook, answer = waiting
                self.running = hook
                await self._budget.settle_notify(self.mw, hook, answer, self._report)
                self.running = None
            while self._pending:
                hook, args = self._take()
                self.running = hook
                await self._budget.run_notify(self.mw, hook, self._ctx, args, self._report)
                self.running = None
        finally:
            self.task = self._budget.task = None  # the budget holds no finished task either
            self.running = None
            self.idle = self._open and self._scheduled is None
            self._now_settled()


def start(queues: Sequence[NotifyQueue]) -> None:
    """Start idle queues that were just given hooks, in the order given (see :func:`deliver`)."""
    batch: list[NotifyQueue] | None = None
    for queue in queues:
        batch = _start(queue, batch)
    if batch is not None:
        _schedule(batch)


def deliver(queues: Sequence[NotifyQueue], hook: str, args: tuple[Any, ...], urgent: bool) -> None:
    """Queue one hook call on each of ``queues``, and start those that were idle, in order.

    A queue with a task starts it (its first step goes to the end of the loop's ready queue); a
    run of plain queues next to each other shares one loop callback, at the place their tasks'
    first steps would have taken there, side by side. What :meth:`NotifyQueue.add` and
    :func:`start` do, in one pass: this runs for every event the session emits.
    """
    call = (hook, args)
    batch: list[NotifyQueue] | None = None
    for queue in queues:
        if urgent:
            queue._pending.insert(queue._urgent, call)
            queue._urgent += 1
        else:
            queue._pending.append(call)
        if not queue.idle:
            continue
        queue.idle = False
        if queue.plain:
            if batch is None:
                batch = [queue]
            else:
                batch.append(queue)
            queue._scheduled = batch  # the batch is the token its callback checks
        else:
            if batch is not None:
                _schedule(batch)
                batch = None
            queue._start_task()
    if batch is not None:
        batch[0]._loop.call_soon(_run_batch, batch)  # _schedule, in place


def _start(queue: NotifyQueue, batch: list[NotifyQueue] | None) -> list[NotifyQueue] | None:
    """Start ``queue``: in ``batch`` (returned, made if None) if plain, else in its task."""
    queue.idle = False
    if queue.plain:
        if batch is None:
            batch = []
        batch.append(queue)
        queue._scheduled = batch  # the batch is the token its callback checks
        return batch
    if batch is not None:
        _schedule(batch)
    queue._start_task()
    return None


def _schedule(batch: list[NotifyQueue]) -> None:
    batch[0]._loop.call_soon(_run_batch, batch)


def _run_batch(batch: list[NotifyQueue]) -> None:
    for queue in batch:
        # in a copy of the queue's context, as each of its tasks ran in a copy of it
        queue._context.copy().run(queue._run_plain, batch)


def _overrides(mw: Middleware, hook: str) -> bool:
    return getattr(type(mw), hook, None) is not getattr(Middleware, hook, None)
