"""Immutable requests that flow through the chain, and the decisions hooks return as values."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from livekit.agents import RunContext
from livekit.agents.llm import ChatContext, ChatMessage
from livekit.agents.voice.speech_handle import SpeechHandle

__all__ = [
    "InferenceRequest",
    "InterruptDecision",
    "InterruptRequest",
    "ProtectionDecision",
    "ProtectionRequest",
    "ResumeDecision",
    "ResumeRequest",
    "ShutdownDecision",
    "ShutdownRequest",
    "ShutdownSource",
    "SpeechDecision",
    "SpeechInfo",
    "ToolCall",
    "ToolOutcome",
    "UserTurn",
]


@dataclass(frozen=True)
class ToolCall:
    """One function tool call on its way to the tool body.

    Attributes:
        name: The tool's name, as the LLM sees it.
        arguments: The LLM's arguments, by parameter name (``RunContext`` excluded).
        call_id: The LLM's call id, when the tool receives a ``RunContext``.
        run_context: The call's ``RunContext`` if the tool declares one, else None.
        cancellable: The tool is flagged ``ToolFlag.CANCELLABLE``.
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    call_id: str | None = None
    run_context: RunContext[Any] | None = None
    cancellable: bool = False

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
        created_at: ``time.time()`` when livekit created it.
        cut_in: The app means it to play over a speaking caller: created by
            ``on_user_turn_exceeded`` (livekit's ``user_turn_limit``) or inside
            :func:`resilient_agent._session.cut_in`. Middleware leave its timing to livekit.
    """

    handle: SpeechHandle
    source: Literal["say", "generate_reply"]
    user_initiated: bool
    tool: str | None = None
    created_at: float = 0.0
    cut_in: bool = False

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


@dataclass(frozen=True)
class UserTurn:
    """A user turn livekit committed, on its way to the app's ``on_user_turn_completed``.

    Attributes:
        text: The user's words; change them with ``turn.override(text=...)``.
        message: livekit's message object (the one that goes into the history).
        turn_ctx: The throw-away context of this turn's reply.
    """

    text: str
    message: ChatMessage
    turn_ctx: ChatContext

    def override(self, **changes: Any) -> UserTurn:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class InferenceRequest:
    """One LLM inference on its way to the app's ``llm_node``.

    Attributes:
        chat_ctx: This inference's context (livekit's per-inference copy).
        tools: The tools offered (livekit reads in-place edits back).
        model_settings: livekit's model settings for the node.
        speech: The speech whose reply this inference makes (a tool reply's is the speech
            that called the tool), when livekit tells; None otherwise.
    """

    chat_ctx: ChatContext
    tools: list[Any]
    model_settings: Any
    speech: SpeechHandle | None = None

    def override(self, **changes: Any) -> InferenceRequest:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


ShutdownSource = Literal["session.shutdown", "session.aclose", "job.shutdown", "end_call"]


@dataclass(frozen=True)
class ShutdownRequest:
    """Someone asked to end the call.

    Attributes:
        source: Which API was called.
        tool: The function tool whose body asked, if any.
        farewell: The last speech that tool created (the farewell), if any.
        requested_at: ``time.time()`` of the request.
    """

    source: ShutdownSource
    tool: str | None
    farewell: SpeechInfo | None
    requested_at: float


@dataclass(frozen=True)
class ShutdownDecision:
    """What ``decide_shutdown`` answers.

    Attributes:
        action: ``now`` (after ``tail_pad_s``), ``wait`` (ask again when ``wait_for`` is done)
            or ``veto`` (keep the call).
        reason: Why, for logs and events.
        tail_pad_s: Seconds to wait before hanging up, for telephony buffers.
        wait_for: The speech to wait for with ``wait``.
    """

    action: Literal["now", "wait", "veto"]
    reason: str = ""
    tail_pad_s: float = 0.0
    wait_for: SpeechHandle | None = None

    @classmethod
    def now(cls, reason: str = "", *, tail_pad_s: float = 0.0) -> ShutdownDecision:
        """Hang up (after the tail pad)."""
        return cls("now", reason, tail_pad_s)

    @classmethod
    def wait(cls, speech: SpeechHandle, reason: str = "") -> ShutdownDecision:
        """Ask again once ``speech`` is done."""
        return cls("wait", reason, wait_for=speech)

    @classmethod
    def veto(cls, reason: str) -> ShutdownDecision:
        """Keep the call."""
        return cls("veto", reason)


@dataclass(frozen=True)
class InterruptRequest:
    """A non-forced ``session.interrupt()`` met a protected current speech (livekit would raise).

    Attributes:
        speech: The protected current speech.
    """

    speech: SpeechHandle


@dataclass(frozen=True)
class InterruptDecision:
    """What ``decide_interrupt`` answers.

    Attributes:
        action: ``defer``: livekit's interrupt still runs (it interrupts the interruptible
            background speeches), its refusal for the protected speech is swallowed, the speech
            plays to the end, the speeches queued behind it are interrupted as livekit's
            interrupt does (up to the first protected one) and the caller gets a future done once
            they are; ``refuse``: livekit raises, as it does without the library.
        reason: Why, for logs and events.
    """

    action: Literal["defer", "refuse"]
    reason: str = ""

    @classmethod
    def defer(cls, reason: str = "") -> InterruptDecision:
        """Let the protected speech finish instead of raising."""
        return cls("defer", reason)

    @classmethod
    def refuse(cls, reason: str = "") -> InterruptDecision:
        """Raise livekit's ``RuntimeError``."""
        return cls("refuse", reason)


@dataclass(frozen=True)
class ProtectionRequest:
    """A tool body called ``ctx.disallow_interruptions()``; livekit has not been called yet.

    Attributes:
        tool: The tool's name.
        speech: The tool's owning speech (``ctx.speech_handle``).
    """

    tool: str
    speech: SpeechHandle


@dataclass(frozen=True)
class ProtectionDecision:
    """What ``decide_protection`` answers.

    Attributes:
        action: ``protect`` calls livekit's ``disallow_interruptions()``; ``decline`` returns
            without calling it (the speech keeps its setting, the tool goes on).
        reason: Why, for logs and events.
    """

    action: Literal["protect", "decline"]
    reason: str = ""

    @classmethod
    def protect(cls, reason: str = "") -> ProtectionDecision:
        """Call livekit's ``disallow_interruptions()``."""
        return cls("protect", reason)

    @classmethod
    def decline(cls, reason: str) -> ProtectionDecision:
        """Leave the speech as it is; the tool goes on."""
        return cls("decline", reason)


@dataclass(frozen=True)
class ResumeRequest:
    """A speech livekit had paused for the caller was resumed, because a tool protected it.

    Asked synchronously right after livekit's ``disallow_interruptions()`` returned, before a
    frame of the resumed speech plays.

    Attributes:
        tool: The tool that protected it.
        speech: The resumed speech, now protected.
    """

    tool: str
    speech: SpeechHandle


@dataclass(frozen=True)
class ResumeDecision:
    """What ``decide_resume`` answers.

    Attributes:
        action: ``hold``: the answering middleware has paused the speech's audio and owns its
            release (the first such answer wins, so one middleware holds it); ``play``: let it
            play now.
        reason: Why, for logs and events.
    """

    action: Literal["hold", "play"]
    reason: str = ""

    @classmethod
    def hold(cls, reason: str) -> ResumeDecision:
        """The answering middleware holds the speech."""
        return cls("hold", reason)

    @classmethod
    def play(cls, reason: str = "") -> ResumeDecision:
        """The speech plays now."""
        return cls("play", reason)
