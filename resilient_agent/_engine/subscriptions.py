"""Livekit listeners a middleware adds, inside the fault boundary and removed at its close.

livekit calls an emitter's listeners synchronously and only logs what they raise: a listener a
middleware added with ``emitter.on(...)`` would fail outside the chain's fault boundary, with no
``middleware_error`` and no name. ``ctx.listen(emitter, event, handler, by=self)`` adds it
through :class:`Subscriptions` instead: an exception is reported like any hook's
(``middleware_error``, ``hook="listener:<event>"``, ``action="continued_without_it"``) and the
emitter goes on to its next listener; the listener is removed when its middleware closes (or
sits the session out), or earlier by the function ``listen`` returns.

A listener is synchronous and livekit waits for it, so it has no time budget: keep it cheap,
and start a task for anything that waits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .fanout import Emitter, FanOut, Guarded

__all__ = ["Emitter", "ErrorReport", "Subscriptions"]

ErrorReport = Callable[[Any, str, BaseException, str], None]
"""Told ``(middleware, hook, exception, action)``; the middleware is any ``state.Named``."""


class _GuardedListener(Guarded):
    """Calls the handler; an exception is reported under the middleware's name, never raised.

    The session's fan-out calls the handler itself and hands a failure to :meth:`failed`.
    """

    __slots__ = ("_by", "_event", "_report")

    def __init__(
        self, by: Any, event: str, handler: Callable[[Any], Any], report: ErrorReport
    ) -> None:
        super().__init__(handler)
        self._by = by
        self._event = event
        self._report = report

    def failed(self, exc: Exception) -> None:
        """Report ``exc`` as the middleware's listener's failure."""
        self._report(self._by, f"listener:{self._event}", exc, "continued_without_it")


class Subscriptions:
    """The listeners middleware added to livekit emitters in one session, by middleware.

    Args:
        report: Told ``(middleware, hook, exception, action)`` when a listener raises; read at
            each failure (the session's runtime sets it once it exists).
        fanout: Registers the listeners on the emitters (the session's: one registration for
            listeners added one after another, see :mod:`.fanout`).
    """

    def __init__(self, report: Callable[[], ErrorReport], fanout: FanOut | None = None) -> None:
        self._report = report
        self._fanout = fanout if fanout is not None else FanOut()
        self._added: list[tuple[Any, Emitter, str, _GuardedListener]] = []

    def listen(
        self, emitter: Emitter, event: str, handler: Callable[[Any], Any], *, by: Any
    ) -> Callable[[], None]:
        """Add ``handler`` for ``event`` on ``emitter`` inside the fault boundary.

        Returns:
            Removes the listener (again: nothing happens).
        """
        listener = _GuardedListener(by, event, handler, self._report_now)
        entry = (by, emitter, event, listener)
        self._fanout.on(emitter, event, listener)
        self._added.append(entry)

        def remove() -> None:
            if entry in self._added:
                self._added.remove(entry)
                self._fanout.off(emitter, event, listener)

        return remove

    def _report_now(self, by: Any, hook: str, exc: BaseException, action: str) -> None:
        self._report()(by, hook, exc, action)

    def release(self, by: object) -> None:
        """Remove every listener ``by`` added (its chain closes, or it sits the session out)."""
        kept: list[tuple[Any, Emitter, str, _GuardedListener]] = []
        for entry in self._added:
            owner, emitter, event, listener = entry
            if owner is by:
                self._fanout.off(emitter, event, listener)
            else:
                kept.append(entry)
        self._added = kept

    def __len__(self) -> int:
        return len(self._added)
