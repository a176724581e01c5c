"""The ``Middleware`` base class and the table of hooks the chain dispatches.

Three kinds of hooks:

* **notify** (``on_*``, ``async``): told what happened; a failure is logged and reported, and the
  chain goes on. Each middleware sees the events in livekit's order ("the caller started
  speaking" overtakes bookkeeping), in a task of its own: one that is slow holds up only itself,
  and there is no order across middleware. Hooks marked :func:`never_waits` need no task.
* **decide** (``decide_*``, plain functions): asked synchronously, inside livekit's own call, what
  to do; the first answer that is not None wins. They must not block.
* **wrap** (``wrap_*``, ``async``): an onion around an action; the first middleware is outermost
  and calls ``call_next`` zero or more times.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Literal, TypeVar

from livekit.agents.voice import events as lk_events

from .requests import (
    InferenceRequest,
    InterruptDecision,
    InterruptRequest,
    ProtectionDecision,
    ProtectionRequest,
    ResumeDecision,
    ResumeRequest,
    ShutdownDecision,
    ShutdownRequest,
    SpeechDecision,
    SpeechInfo,
    ToolCall,
    ToolOutcome,
    UserTurn,
)
from .state import CloseReason, MiddlewareContext

__all__ = [
    "HOOKS",
    "HookKind",
    "HookSpec",
    "InferenceNext",
    "Middleware",
    "Position",
    "ToolCallNext",
    "UserTurnNext",
    "never_waits",
    "runs_without_a_task",
]

Position = Literal["first", "normal", "last"]
HookKind = Literal["notify", "decide", "wrap"]
ToolCallNext = Callable[[ToolCall], Awaitable[Any]]
UserTurnNext = Callable[[UserTurn], Awaitable[None]]
InferenceNext = Callable[[InferenceRequest], Awaitable[Any]]

_Hook = TypeVar("_Hook", bound=Callable[..., Awaitable[None]])
# set on a notify hook's function by never_waits
_NEVER_WAITS = "__resilient_agent_never_waits__"


def never_waits(hook: _Hook) -> _Hook:
    """Mark an ``async def`` notify hook that returns without awaiting anything that waits.

    A middleware whose notify hooks are all marked needs no task to run them: the chain runs
    them in a callback of the loop, at the point where the middleware's task would have run
    them, in the same order (see :mod:`resilient_agent._engine.dispatch`). Inside them
    ``asyncio.current_task()`` is None (so no ``asyncio.timeout``). Should one wait after all, a
    task takes it over from there, under the middleware's time budget as usual.
    """
    setattr(hook, _NEVER_WAITS, True)
    return hook


def runs_without_a_task(mw: Middleware, hook: str) -> bool:
    """Whether ``mw``'s ``hook`` is marked :func:`never_waits`."""
    return getattr(getattr(type(mw), hook, None), _NEVER_WAITS, False) is True


API_VERSION = 1
"""The middleware API version this core implements; plugins declare the one they need."""


class Middleware:
    """Base class: override only the hooks you need (the others are never dispatched).

    Attributes:
        name: Unique within a chain; defaults to the class name.
        position: ``first``, ``normal`` or ``last``; list order decides within a position.
        api_version: The middleware API version the class was written for.
        hook_budget_s: How long one hook call (or ``setup``/``aclose``) may run before it is
            treated as hung, cancelled and reported; wrap hooks are timed only outside
            ``call_next``. None: ``DEFAULT_HOOK_BUDGET_S`` (5 s). A class or an instance may
            set it.
    """

    name: ClassVar[str | None] = None
    hook_budget_s: float | None = None
    position: ClassVar[Position] = "normal"
    api_version: ClassVar[int] = API_VERSION

    @property
    def display_name(self) -> str:
        """``name``, or the class name."""
        return type(self).name or type(self).__name__

    def for_session(self) -> Middleware:
        """The instance that runs one session; the default is this very instance.

        Nothing is copied: a flag set on the instance, a lock or a client it holds, is what the
        session uses. Keep per-session state in :meth:`setup`, or pass a ``MiddlewareSpec`` to
        get a new instance per session (see :mod:`resilient_agent._engine.live`).
        """
        return self

    async def setup(self, ctx: MiddlewareContext) -> None:
        """Prepare for a session; raise ``MiddlewareNotUsed`` to sit this session out."""

    async def aclose(self, ctx: MiddlewareContext, reason: CloseReason) -> None:
        """Release what ``setup`` acquired; the chain closes in reverse order.

        Args:
            ctx: The session's context; on a handoff, :meth:`MiddlewareContext.carry` leaves
                state for the next chain's ``setup`` to :meth:`MiddlewareContext.take`.
            reason: ``"handoff"`` (the next ``ResilientAgent`` of the session entered: the
                call goes on) or ``"session_end"``.

        An ``aclose(self)`` without arguments (the first form of this hook) is still called.
        """

    def option_tool_names(self) -> Mapping[str, Collection[str]]:
        """The tool names this middleware's options mention, by option (none by default).

        When a session starts, each name the agent has no function tool for is warned about
        (with the closest tool name) and listed in ``call_report.unknown_tools``: tools can
        be added later, so it is not an error. Override it when an option names tools, e.g.
        ``{"policies": self.policies.keys()}``.
        """
        return {}

    # -- notify ------------------------------------------------------------------------------
    async def on_session_start(self, ctx: MiddlewareContext) -> None:
        """The agent entered the session."""

    async def on_user_state(
        self, ctx: MiddlewareContext, ev: lk_events.UserStateChangedEvent
    ) -> None:
        """The caller started or stopped speaking (starting to speak overtakes other events)."""

    async def on_agent_state(
        self, ctx: MiddlewareContext, ev: lk_events.AgentStateChangedEvent
    ) -> None:
        """The agent's state changed."""

    async def on_user_transcript(
        self, ctx: MiddlewareContext, ev: lk_events.UserInputTranscribedEvent
    ) -> None:
        """An interim or final transcript arrived."""

    async def on_conversation_item(
        self, ctx: MiddlewareContext, ev: lk_events.ConversationItemAddedEvent
    ) -> None:
        """A message was committed to the history."""

    async def on_speech_created(self, ctx: MiddlewareContext, speech: SpeechInfo) -> None:
        """Livekit created a speech (after ``decide_speech`` ran)."""

    async def on_speech_done(self, ctx: MiddlewareContext, speech: SpeechInfo) -> None:
        """A speech finished, played out or interrupted."""

    async def on_tool_start(self, ctx: MiddlewareContext, call: ToolCall) -> None:
        """A function tool is about to run."""

    async def on_tool_exit(
        self, ctx: MiddlewareContext, call: ToolCall, outcome: ToolOutcome
    ) -> None:
        """A function tool returned or raised."""

    async def on_false_interruption(
        self, ctx: MiddlewareContext, ev: lk_events.AgentFalseInterruptionEvent
    ) -> None:
        """Livekit judged an interruption false."""

    async def on_session_end(self, ctx: MiddlewareContext, ev: lk_events.CloseEvent) -> None:
        """The session closed."""

    # -- decide --------------------------------------------------------------------------------
    def decide_speech(self, ctx: MiddlewareContext, speech: SpeechInfo) -> SpeechDecision | None:
        """Protect a new speech or allow interruptions; None leaves it to the next middleware."""
        return None

    def decide_shutdown(
        self, ctx: MiddlewareContext, request: ShutdownRequest
    ) -> ShutdownDecision | None:
        """Hang up now, wait for a speech, or veto; None leaves it to the next middleware."""
        return None

    def decide_interrupt(
        self, ctx: MiddlewareContext, request: InterruptRequest
    ) -> InterruptDecision | None:
        """A non-forced ``session.interrupt()`` met a protected speech: defer to it, or refuse."""
        return None

    def decide_protection(
        self, ctx: MiddlewareContext, request: ProtectionRequest
    ) -> ProtectionDecision | None:
        """A tool calls ``ctx.disallow_interruptions()``: let it reach livekit, or decline."""
        return None

    def decide_resume(
        self, ctx: MiddlewareContext, request: ResumeRequest
    ) -> ResumeDecision | None:
        """A paused speech a tool just protected was resumed: hold it, or let it play."""
        return None

    # -- wrap ----------------------------------------------------------------------------------
    async def wrap_tool_call(
        self, ctx: MiddlewareContext, call: ToolCall, call_next: ToolCallNext
    ) -> Any:
        """Around a tool body: change the call, skip it (return a result), or retry it."""
        return await call_next(call)

    async def wrap_user_turn(
        self, ctx: MiddlewareContext, turn: UserTurn, call_next: UserTurnNext
    ) -> None:
        """Around the app's ``on_user_turn_completed``: change the words, or handle failures."""
        await call_next(turn)

    async def wrap_llm_request(
        self, ctx: MiddlewareContext, request: InferenceRequest, call_next: InferenceNext
    ) -> Any:
        """Around the app's ``llm_node`` for every inference (user turns, tool replies, ...)."""
        return await call_next(request)


@dataclass(frozen=True)
class HookSpec:
    """How the chain dispatches one hook.

    Attributes:
        name: The method name.
        kind: notify, decide or wrap.
        answer: For a decide hook, the one type it may answer besides None: any other answer
            is reported as the middleware's failure and treated as None.
    """

    name: str
    kind: HookKind
    answer: type | None = None


HOOKS: Mapping[str, HookSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            HookSpec("on_session_start", "notify"),
            HookSpec("on_user_state", "notify"),
            HookSpec("on_agent_state", "notify"),
            HookSpec("on_user_transcript", "notify"),
            HookSpec("on_conversation_item", "notify"),
            HookSpec("on_speech_created", "notify"),
            HookSpec("on_speech_done", "notify"),
            HookSpec("on_tool_start", "notify"),
            HookSpec("on_tool_exit", "notify"),
            HookSpec("on_false_interruption", "notify"),
            HookSpec("on_session_end", "notify"),
            HookSpec("decide_speech", "decide", SpeechDecision),
            HookSpec("decide_shutdown", "decide", ShutdownDecision),
            HookSpec("decide_interrupt", "decide", InterruptDecision),
            HookSpec("decide_protection", "decide", ProtectionDecision),
            HookSpec("decide_resume", "decide", ResumeDecision),
            HookSpec("wrap_tool_call", "wrap"),
            HookSpec("wrap_user_turn", "wrap"),
            HookSpec("wrap_llm_request", "wrap"),
        )
    }
)
"""Every hook the chain knows, by name."""

LIFECYCLE = ("setup", "aclose", "for_session")
