"""Events ``ResilientAgent`` emits on its own emitter, shaped like LiveKit's session events."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "MiddlewareErrorEvent",
    "RaceDetectedEvent",
    "RaceHandledEvent",
    "ResilientEvent",
    "UnknownToolEvent",
    "ResilientEventTypes",
]

ResilientEventTypes = Literal["middleware_error", "race_detected", "race_handled", "unknown_tool"]


def _now() -> float:
    # read at call time, so a patched clock (the lab's virtual time) is honoured
    return time.time()


class MiddlewareErrorEvent(BaseModel):
    """A middleware hook failed (raised, hung, or answered with nothing usable).

    The chain went on as if that middleware were absent for that step.

    Attributes:
        middleware: The middleware's name.
        hook: The hook (or ``setup``/``aclose``) that failed.
        error: ``repr`` of the exception, or what was wrong.
        action: What the chain did instead, e.g. ``"bypassed"``, ``"kept_inner_result"``.
    """

    type: Literal["middleware_error"] = "middleware_error"
    middleware: str
    hook: str
    error: str
    action: str = "continued_without_it"
    created_at: float = Field(default_factory=_now)


class RaceDetectedEvent(BaseModel):
    """A middleware saw a race.

    Attributes:
        kind: Which race, e.g. ``"speech_over_speaking_user"``.
        middleware: Who saw it.
        details: Ids and timings; never transcripts.
        counts: Counters this event adds to ``CallReport.counters`` (e.g. ``{"stalls": 1}``).
    """

    type: Literal["race_detected"] = "race_detected"
    kind: str
    middleware: str
    details: dict[str, Any] = Field(default_factory=dict)
    counts: dict[str, int] = Field(default_factory=dict)
    created_at: float = Field(default_factory=_now)


class RaceHandledEvent(BaseModel):
    """A middleware acted on a race.

    Attributes:
        kind: Which race.
        action: What it did, e.g. ``"merged_into_next_turn"``.
        middleware: Who acted.
        details: Ids and timings; never transcripts.
        counts: Counters this event adds to ``CallReport.counters`` (e.g. ``{"words": 5}``).
    """

    type: Literal["race_handled"] = "race_handled"
    kind: str
    action: str
    middleware: str
    details: dict[str, Any] = Field(default_factory=dict)
    counts: dict[str, int] = Field(default_factory=dict)
    created_at: float = Field(default_factory=_now)


class UnknownToolEvent(BaseModel):
    """An option names a tool the agent did not have when the session started.

    Attributes:
        middleware: Whose option it is.
        option: The option, e.g. ``"policies"``.
        tool: The name given.
        did_you_mean: The agent's closest tool name, if one is close.
    """

    type: Literal["unknown_tool"] = "unknown_tool"
    middleware: str
    option: str
    tool: str
    did_you_mean: str | None = None
    created_at: float = Field(default_factory=_now)


ResilientEvent = Annotated[
    MiddlewareErrorEvent | RaceDetectedEvent | RaceHandledEvent | UnknownToolEvent,
    Field(discriminator="type"),
]
