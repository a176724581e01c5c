"""The per-call summary: what the chain saw and did during one session, ready for metrics."""

from __future__ import annotations

import time
from collections import Counter
from typing import Literal

from pydantic import BaseModel, Field

from .._engine.events import (
    MiddlewareErrorEvent,
    RaceDetectedEvent,
    RaceHandledEvent,
    ResilientEvent,
    UnknownToolEvent,
)

__all__ = ["SHUTDOWN_REQUEST", "CallReport", "CallReporter"]

SHUTDOWN_REQUEST = "shutdown_request"
"""The race kind the core's own shutdown gate reports each hang-up decision under."""


def _now() -> float:
    return time.time()


class CallReport(BaseModel):
    """A session's races and actions, counted from the events the middleware emitted.

    The core knows no middleware by name: each event may carry ``counts`` (e.g. a middleware that
    recovers words sends ``{"words": 5}``), and the report sums them into ``counters``.

    Attributes:
        call_id: The id the library's log records carry for this session.
        races: Races detected, by kind.
        actions: Actions taken, as ``"kind:action"``.
        counters: The sum of every event's ``counts``, by name.
        shutdown_decisions: Each hang-up request's outcome, in order (``hung_up``/``kept_call``).
        middleware_errors: Middleware failures, as ``"middleware.hook"``.
        unknown_tools: Tool names in options that the agent did not have when the session
            started, as ``"middleware.option['tool']"``.
    """

    type: Literal["call_report"] = "call_report"
    call_id: str
    races: dict[str, int] = Field(default_factory=dict)
    actions: dict[str, int] = Field(default_factory=dict)
    counters: dict[str, int] = Field(default_factory=dict)
    shutdown_decisions: list[str] = Field(default_factory=list)
    middleware_errors: list[str] = Field(default_factory=list)
    unknown_tools: list[str] = Field(default_factory=list)
    created_at: float = Field(default_factory=_now)


class CallReporter:
    """Counts our events as they are emitted."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        self._races: Counter[str] = Counter()
        self._actions: Counter[str] = Counter()
        self._counters: Counter[str] = Counter()
        self._shutdowns: list[str] = []
        self._errors: list[str] = []
        self._unknown_tools: list[str] = []

    def record(self, event: ResilientEvent) -> None:
        """Count one event."""
        if isinstance(event, RaceDetectedEvent):
            self._races[event.kind] += 1
            self._counters.update(event.counts)
        elif isinstance(event, RaceHandledEvent):
            self._actions[f"{event.kind}:{event.action}"] += 1
            self._counters.update(event.counts)
            if event.kind == SHUTDOWN_REQUEST:
                self._shutdowns.append(event.action)
        elif isinstance(event, MiddlewareErrorEvent):
            self._errors.append(f"{event.middleware}.{event.hook}")
        elif isinstance(event, UnknownToolEvent):
            self._unknown_tools.append(f"{event.middleware}.{event.option}[{event.tool!r}]")

    def report(self) -> CallReport:
        """The summary so far."""
        return CallReport(
            call_id=self.call_id,
            races=dict(self._races),
            actions=dict(self._actions),
            counters=dict(self._counters),
            shutdown_decisions=list(self._shutdowns),
            middleware_errors=list(self._errors),
            unknown_tools=list(self._unknown_tools),
        )
