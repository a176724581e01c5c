"""The per-call summary: what the chain saw and did during one session, ready for metrics."""

from __future__ import annotations

import time
from collections import Counter
from typing import Literal

from pydantic import BaseModel, Field

from .events import (
    MiddlewareErrorEvent,
    RaceDetectedEvent,
    RaceHandledEvent,
    ResilientEvent,
    UnknownToolEvent,
)

__all__ = ["CallReport", "CallReporter"]


def _now() -> float:
    return time.time()


class CallReport(BaseModel):
    """A session's races and actions, counted.

    Attributes:
        call_id: The id the library's log records carry for this session.
        races: Races detected, by kind.
        actions: Actions taken, as ``"kind:action"``.
        words_recovered: Words livekit withheld from the STT that were recovered.
        dropped_turns_answered: User turns livekit dropped that were answered.
        watchdog_recoveries: Stalls the watchdog found (stuck turns, replies waiting for a
            silence, hanging replies, interrupted speeches not done); ``races`` has each kind.
        shutdown_decisions: Each hang-up request's outcome, in order (``hung_up``/``kept_call``).
        middleware_errors: Hook failures, as ``"middleware.hook"``.
        unknown_tools: Tool names in options that the agent did not have when the session
            started, as ``"middleware.option['tool']"``.
    """

    type: Literal["call_report"] = "call_report"
    call_id: str
    races: dict[str, int] = Field(default_factory=dict)
    actions: dict[str, int] = Field(default_factory=dict)
    words_recovered: int = 0
    dropped_turns_answered: int = 0
    watchdog_recoveries: int = 0
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
        self._words = 0
        self._stalls = 0
        self._shutdowns: list[str] = []
        self._errors: list[str] = []
        self._unknown_tools: list[str] = []

    def record(self, event: ResilientEvent) -> None:
        """Count one event."""
        if isinstance(event, RaceDetectedEvent):
            self._races[event.kind] += 1
            if event.middleware == "Watchdog":
                self._stalls += 1
        elif isinstance(event, RaceHandledEvent):
            self._actions[f"{event.kind}:{event.action}"] += 1
            if event.action == "recovered_words":
                self._words += int(event.details.get("words", 0))
            if event.kind == "shutdown_request":
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
            words_recovered=self._words,
            dropped_turns_answered=self._actions["dropped_user_turn:answered"],
            watchdog_recoveries=self._stalls,
            shutdown_decisions=list(self._shutdowns),
            middleware_errors=list(self._errors),
            unknown_tools=list(self._unknown_tools),
        )
