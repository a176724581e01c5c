"""Immutable requests that flow through the chain, and the decisions hooks return as values."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from livekit.agents import RunContext
from livekit.agents.voice.speech_handle import SpeechHandle

__all__ = ["SpeechDecision", "SpeechInfo", "ToolCall", "ToolOutcome"]


@dataclass(frozen=True)
class ToolCall:
    """One function tool call on its way to the tool body.

    Attributes:
        name: The tool's name, as the LLM sees it.
        arguments: The LLM's arguments, by parameter name (``RunContext`` excluded).
        call_id: The LLM's call id, when the tool receives a ``RunContext``.
        run_context: The call's ``RunContext`` if the tool declares one, else None.
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    call_id: str | None = None
    run_context: RunContext[Any] | None = None

    def override(self, **changes: Any) -> ToolCall:
        """A copy with ``changes`` applied, e.g. ``call.override(arguments={...})``."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class ToolOutcome:
    """How a tool call ended.

    Attributes:
        result: What the tool returned (None when it raised).
        error: What it raised, if anything (``ToolError`` and ``StopResponse`` included).
        duration_s: Seconds from entry to exit.
    """

    result: Any = None
    error: BaseException | None = None
    duration_s: float = 0.0


@dataclass(frozen=True)
class SpeechInfo:
    """A speech livekit just created, as the chain sees it.

    Attributes:
        handle: livekit's handle.
        source: ``say`` or ``generate_reply``.
        user_initiated: As livekit reports it.
        tool: The function tool whose body created it, if any.
    """

    handle: SpeechHandle
    source: Literal["say", "generate_reply"]
    user_initiated: bool
    tool: str | None = None

    @property
    def id(self) -> str:
        """The handle's id."""
        return self.handle.id


@dataclass(frozen=True)
class SpeechDecision:
    """What ``decide_speech`` answers: protect a speech from interruptions, or allow them.

    Attributes:
        allow_interruptions: The value to give the handle.
        reason: Why, for logs and events.
    """

    allow_interruptions: bool
    reason: str = ""

    @classmethod
    def protect(cls, reason: str = "") -> SpeechDecision:
        """The speech must not be interrupted."""
        return cls(False, reason)

    @classmethod
    def allow(cls, reason: str = "") -> SpeechDecision:
        """The caller may interrupt the speech."""
        return cls(True, reason)
