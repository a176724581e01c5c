"""Fault boundaries: a misbehaving hook costs its own middleware that step, nothing more.

Every awaited hook runs under a time budget (:data:`DEFAULT_HOOK_BUDGET_S`, or the middleware's
``hook_budget_s``). For a wrap hook only the time it spends itself counts: the budget pauses
while ``call_next`` runs (a slow tool body is not the middleware's fault). A budget cancels the
hook's own await, in the task it runs in, without an extra task per call.

A wrap hook that fails is replaced by what the chain would have done without it:

* it raised (or hung, or answered ``None`` where a value is required, or returned without
  calling ``call_next`` where that gives nothing) before calling ``call_next``: ``call_next`` runs
  as if the middleware were absent (``bypassed``);
* it failed after ``call_next`` returned or raised: that outcome is kept (``kept_inner_result``).

``ToolError`` and ``StopResponse`` are decisions livekit gives meaning to, never faults, and an
exception ``call_next`` raised passes through unchanged.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from livekit.agents import StopResponse
from livekit.agents.llm import ToolError

from .state import MiddlewareContext, Named

__all__ = [
    "DEFAULT_HOOK_BUDGET_S",
    "PASS_THROUGH",
    "Budget",
    "HookTimeoutError",
    "guarded_wrap",
]

DEFAULT_HOOK_BUDGET_S = 5.0
"""How long a hook may run (outside ``call_next``) before it is treated as hung."""

PASS_THROUGH = (ToolError, StopResponse)
"""Exceptions livekit gives meaning to; boundaries let them through unchanged."""

Reporter = Callable[[Named | str, str, BaseException, str], None]
Layer = Callable[[Any], Awaitable[Any]]


class HookTimeoutError(Exception):
    """A hook ran past its time budget and was cancelled."""


class NoAnswerError(Exception):
    """A wrap hook gave nothing where a value was required."""


class Budget:
    """Cancels the running task once ``seconds`` pass outside :meth:`pause`/:meth:`resume`.

    Use as a context manager around the hook's await; an expiry surfaces as
    ``asyncio.CancelledError`` with :attr:`expired` set, which the owner then :meth:`absorb` s.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._handle: asyncio.Handle | None = None
        self._armed_at = 0.0
        self._paused = 0

    def __enter__(self) -> Budget:
        self._arm()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._disarm()

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
        if self._task is not None and sys.version_info >= (3, 11):
            self._task.uncancel()

    def _arm(self) -> None:
        if self._task is not None:
            # most hooks return without ever waiting: the timer is set only once the hook has
            # yielded to the loop, so those leave no cancelled timer behind in the loop's heap
            # (where every timer of the call would be compared against it until it is due)
            self._armed_at = self._loop.time()
            self._handle = self._loop.call_soon(self._start_timer)

    def _start_timer(self) -> None:
        self._handle = self._loop.call_at(self._armed_at + self.seconds, self._expire)

    def _disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _expire(self) -> None:
        self._handle = None
        self.expired = True
        if self._task is not None:
            self._task.cancel()


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
        with budget:
            result = await handler(ctx, request, tracked_next)
    except asyncio.CancelledError:
        if not budget.expired:
            raise
        budget.absorb()
        return await instead(HookTimeoutError(f"{hook} ran past {budget.seconds} s"))
    except PASS_THROUGH:
        raise
    except Exception as exc:
        if inner.called and exc is inner.error:
            raise  # call_next's own exception, passed on
        return await instead(exc)
    if budget.expired:
        # the hook swallowed the cancellation: it still ran past its budget
        budget.absorb()
        return await instead(HookTimeoutError(f"{hook} ran past {budget.seconds} s"))
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
