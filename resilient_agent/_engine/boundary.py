"""Fault boundaries: a misbehaving hook costs its own middleware that step, nothing more.

Every awaited hook runs under a time budget (:data:`DEFAULT_HOOK_BUDGET_S`, or the middleware's
``hook_budget_s``). For a wrap hook only the time it spends itself counts: the budget pauses
while ``call_next`` runs (a slow tool body is not the middleware's fault). A budget cancels the
hook's own await, in the task it runs in, without an extra task per call.

A notify hook that raises or runs past its budget is reported and skipped
(:meth:`Budget.run_notify`).

A wrap hook that fails is replaced by what the chain would have done without it:

* it raised (or hung, or answered ``None`` where a value is required, or returned without
  calling ``call_next`` where that gives nothing) before calling ``call_next``: ``call_next`` runs
  as if the middleware were absent (``bypassed``);
* it failed after ``call_next`` returned or raised: that outcome is kept (``kept_inner_result``).

``ToolError`` and ``StopResponse`` are decisions livekit gives meaning to, never faults, and an
exception ``call_next`` raised passes through unchanged.

A hook that raises ``CancelledError`` although nobody cancelled the task it runs in (it awaited
a future someone else cancelled, or raised it itself) has failed like any other: a stray
cancellation let through would end livekit's task (the user turn, the tool call, the inference)
and lose the caller's turn, every turn when the hook does it each time. Only a cancellation of
the task itself (``Task.cancelling()``; before Python 3.11 a task cannot tell, and every
``CancelledError`` is let through) goes on.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Coroutine, Generator
from types import CoroutineType
from typing import Any

from livekit.agents import StopResponse
from livekit.agents.llm import ToolError

from .state import MiddlewareContext, Named

__all__ = [
    "DEFAULT_HOOK_BUDGET_S",
    "PASS_THROUGH",
    "Budget",
    "HookTimeoutError",
    "Resumed",
    "StrayCancellationError",
    "guarded_wrap",
    "stray_cancellation",
]

DEFAULT_HOOK_BUDGET_S = 5.0
"""How long a hook may run (outside ``call_next``) before it is treated as hung."""

PASS_THROUGH = (ToolError, StopResponse)
"""Exceptions livekit gives meaning to; boundaries let them through unchanged."""

Reporter = Callable[[Named | str, str, BaseException, str], None]
Layer = Callable[[Any], Awaitable[Any]]


class HookTimeoutError(Exception):
    """A hook ran past its time budget and was cancelled."""


class StrayCancellationError(Exception):
    """A hook raised ``CancelledError`` although nobody cancelled the task it runs in."""


def stray_cancellation(hook: str) -> StrayCancellationError | None:
    """The fault to report when ``hook`` raised ``CancelledError``, or None if it is genuine.

    Genuine: the running task itself is being cancelled (its owner closes, gives up waiting),
    which must go on. Call it from the ``except asyncio.CancelledError`` clause.
    """
    task = asyncio.current_task()
    if sys.version_info < (3, 11) or task is None or task.cancelling() > 0:
        return None
    return StrayCancellationError(f"{hook} raised CancelledError; its task was not cancelled")


class NoAnswerError(Exception):
    """A wrap hook gave nothing where a value was required."""


class Budget:
    """Cancels the running task once ``seconds`` pass outside :meth:`pause`/:meth:`resume`.

    Use as a context manager around the hook's await; an expiry surfaces as
    ``asyncio.CancelledError`` with :attr:`expired` set, which the owner then :meth:`absorb` s.
    :meth:`run_notify` does all of that for a notify hook.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        """The task cancelled when the budget runs out: the one it was made in, unless set."""
        self._handle: asyncio.Handle | None = None
        self._armed_at = 0.0
        self._paused = 0
        # the hook's coroutine is driven (:meth:`count`): each time it waits, it says so
        # (:meth:`waits`), so the timer is set then, with no callback to set it at each start
        self._driven = False

    def __enter__(self) -> Budget:
        self._arm()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._disarm()

    def count(self) -> None:
        """Start counting now, for a hook coroutine awaited through :class:`Resumed`.

        No timer and no callback yet: the timer is set (:meth:`waits`) only if the hook waits
        while the budget counts. A wrap hook that never waits outside ``call_next`` (most of
        them, most of the time) costs its budget nothing on the loop.
        """
        self._driven = True
        self._arm()

    def count_soon(self) -> None:
        """Set the timer at the loop's next turn, as ``with`` does (counting since :meth:`count`).

        For an awaitable that cannot say when it waits.
        """
        self._driven = False
        if self._paused == 0 and self._handle is None and self.task is not None:
            self._handle = self._loop.call_soon(self._start_timer)

    def waits(self) -> None:
        """The driven hook waits (yields to the loop): set the timer if the budget counts."""
        if (
            self._handle is None
            and self._paused == 0
            and self._driven
            and not self.expired
            and self.task is not None
        ):
            self._handle = self._loop.call_at(self._armed_at + self.seconds, self._expire)

    def pause(self) -> None:
        """Stop counting (the hook handed over to ``call_next``)."""
        self._paused += 1
        if self._paused == 1:
            self._disarm()

    def resume(self) -> None:
        """Count again (``call_next`` returned)."""
        self._paused -= 1
        if self._paused == 0 and not self.expired:
            self._arm()

    def absorb(self) -> None:
        """Take back the cancellation this budget caused, so the task goes on normally."""
        if self.task is not None and sys.version_info >= (3, 11):
            self.task.uncancel()

    def overrun(self, hook: str) -> HookTimeoutError:
        """:meth:`absorb` the expiry, and tell what ran past the budget."""
        self.absorb()
        return HookTimeoutError(f"{hook} ran past {self.seconds} s")

    async def run_notify(
        self, mw: Named, hook: str, ctx: MiddlewareContext, args: tuple[Any, ...], report: Reporter
    ) -> None:
        """Run one notify hook under this budget; a failure is reported, never raised.

        The hook's first step runs here, as an await would run it, and most hooks end in it: the
        budget counts, and its timer is set, only once the hook waits for something. An awaitable
        of another kind than a coroutine is timed from the start. One budget can serve one hook
        after another; :attr:`task` must be the task that awaits this.
        """
        waiting: Awaitable[Any]
        try:
            hook_call = getattr(mw, hook)(ctx, *args)
            if type(hook_call) is CoroutineType:
                try:
                    waiting = Resumed(hook_call, hook_call.send(None))
                except StopIteration:
                    return  # the hook ended in its first step, without waiting for anything
            else:
                waiting = hook_call
        except asyncio.CancelledError:
            stray = stray_cancellation(hook)
            if stray is None:
                raise
            report(mw, hook, stray, "continued_without_it")
            return
        except Exception as exc:
            report(mw, hook, exc, "continued_without_it")
            return
        self.count_from_now()
        await self.settle_notify(mw, hook, waiting, report)

    async def settle_notify(
        self, mw: Named, hook: str, waiting: Awaitable[Any], report: Reporter
    ) -> None:
        """Await what a notify hook waits for, under this budget (from :meth:`count_from_now`).

        A failure is reported, never raised.
        """
        try:
            await waiting
        except asyncio.CancelledError:
            if self.expired:
                report(mw, hook, self.overrun(hook), "cancelled")
                return
            stray = stray_cancellation(hook)
            if stray is None:
                raise
            report(mw, hook, stray, "continued_without_it")
        except Exception as exc:
            report(mw, hook, exc, "continued_without_it")
        else:
            if self.expired:
                # it swallowed the cancellation, still ran past its budget
                report(mw, hook, self.overrun(hook), "cancelled")
        finally:
            self._disarm()

    def count_from_now(self) -> None:
        """Start counting now, with a timer due when the budget runs out."""
        # the hook has already yielded to the loop, so the timer is set at once (no call_soon
        # hop as in _arm: that spares a timer only to hooks that never wait)
        self.expired = False
        self._handle = self._loop.call_later(self.seconds, self._expire)

    def _arm(self) -> None:
        if self.task is not None:
            # most hooks return without ever waiting: the timer is set only once the hook has
            # yielded to the loop, so those leave no cancelled timer behind in the loop's heap
            # (where every timer of the call would be compared against it until it is due)
            self._armed_at = self._loop.time()
            if not self._driven:
                self._handle = self._loop.call_soon(self._start_timer)

    def _start_timer(self) -> None:
        self._handle = self._loop.call_at(self._armed_at + self.seconds, self._expire)

    def disarm(self) -> None:
        """Stop counting for good: the timer, if set, is cancelled."""
        self._disarm()

    def _disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _expire(self) -> None:
        self._handle = None
        self.expired = True
        if self.task is not None:
            self.task.cancel()


def budget_of(mw: object) -> float:
    """The middleware's ``hook_budget_s``, or the default."""
    seconds = getattr(mw, "hook_budget_s", None)
    return DEFAULT_HOOK_BUDGET_S if seconds is None else float(seconds)


class _Inner:
    """What ``call_next`` did, as seen from the wrap hook's boundary."""

    def __init__(self) -> None:
        self.called = False
        self.result: Any = None
        self.error: BaseException | None = None


async def guarded_wrap(
    mw: Named,
    hook: str,
    handler: Callable[..., Awaitable[Any]],
    ctx: MiddlewareContext,
    request: Any,
    call_next: Layer,
    report: Reporter,
) -> Any:
    """Run one wrap hook inside its boundary (see the module docstring)."""
    inner = _Inner()
    budget = Budget(budget_of(mw))

    async def tracked_next(changed: Any) -> Any:
        inner.called = True
        budget.pause()
        try:
            result = await call_next(changed)
        except BaseException as exc:
            inner.result, inner.error = None, exc
            raise
        finally:
            budget.resume()
        inner.result, inner.error = result, None
        return result

    async def instead(fault: BaseException) -> Any:
        if not inner.called:
            report(mw, hook, fault, "bypassed")
            return await call_next(request)
        report(mw, hook, fault, "kept_inner_result")
        if inner.error is not None:
            raise inner.error
        return inner.result

    try:
        budget.count()
        try:
            hook_call = handler(ctx, request, tracked_next)
            if type(hook_call) is CoroutineType:
                # its first step here, as an await would run it: most wrap hooks end in it
                # (call_next included), with no timer ever set
                try:
                    waits_on = hook_call.send(None)
                except StopIteration as done:
                    result = done.value
                else:
                    result = await Resumed(hook_call, waits_on, budget)
            else:
                budget.count_soon()
                result = await hook_call
        finally:
            budget.disarm()
    except asyncio.CancelledError as exc:
        if budget.expired:
            return await instead(budget.overrun(hook))
        stray = stray_cancellation(hook)
        if stray is None or (inner.called and exc is inner.error):
            raise  # the task is being cancelled, or call_next's own cancellation, passed on
        return await instead(stray)
    except PASS_THROUGH:
        raise
    except Exception as exc:
        if inner.called and exc is inner.error:
            raise  # call_next's own exception, passed on
        return await instead(exc)
    if budget.expired:
        # the hook swallowed the cancellation: it still ran past its budget
        return await instead(budget.overrun(hook))
    missing = _missing_answer(hook, result, inner)
    if missing is not None:
        return await instead(NoAnswerError(missing))
    return result


def _missing_answer(hook: str, result: Any, inner: _Inner) -> str | None:
    """Why ``result`` is no answer, or None when it is one."""
    if hook == "wrap_user_turn":
        # the app's on_user_turn_completed must run; StopResponse is how to decline a turn
        return None if inner.called else "returned without calling call_next"
    if result is not None:
        return None
    if not inner.called:
        return "returned None without calling call_next"
    if inner.result is not None:
        return "returned None instead of call_next's result"
    return None


class Resumed:
    """Awaits the rest of a hook coroutine whose first step already ran (and waits on ``first``).

    What ``await`` does with a coroutine, from its second step on: each value it yields goes up
    to the task, and what the task sends or throws in (a wake-up, a cancellation) goes down.
    With a ``budget``, each time the coroutine waits the budget is told (:meth:`Budget.waits`).
    """

    __slots__ = ("_budget", "_coro", "_first")

    def __init__(
        self, coro: Coroutine[Any, Any, Any], first: Any, budget: Budget | None = None
    ) -> None:
        self._coro = coro
        self._first = first
        self._budget = budget

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, waits_on, budget = self._coro, self._first, self._budget
        while True:
            if budget is not None:
                budget.waits()
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
