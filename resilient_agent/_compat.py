"""Every private livekit-agents name the project touches, and every livekit behaviour it relies on.

Private names change between minor releases. Each accessor here degrades to None instead of
raising, and ``tests/test_compat.py`` fails loudly when livekit moves one, so an upgrade is
caught by CI, not by a caller.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from livekit.agents.voice.speech_handle import SpeechHandle

__all__ = [
    "RELIED_ON",
    "Reliance",
    "close_as_caller_left",
    "queued_speeches",
    "session_closing",
    "speech_interrupted_future",
    "tool_call_releasable",
    "speech_scheduled_future",
]


def _future(handle: SpeechHandle, name: str) -> asyncio.Future[Any] | None:
    future = getattr(handle, name, None)
    return future if isinstance(future, asyncio.Future) else None


def speech_scheduled_future(handle: SpeechHandle) -> asyncio.Future[Any] | None:
    """Done when livekit queued the speech for playout (``SpeechHandle._scheduled_fut``).

    livekit has no event for it; the lab's timelines use it to draw the queued stretch.
    """
    return _future(handle, "_scheduled_fut")


def speech_interrupted_future(handle: SpeechHandle) -> asyncio.Future[Any] | None:
    """Done when the speech was interrupted (``SpeechHandle._interrupt_fut``).

    ``SpeechHandle.interrupted`` tells whether, not when; the lab's timelines need when.
    """
    return _future(handle, "_interrupt_fut")


_SPEECH_QUEUE = "_speech_q"


def queued_speeches(session: Any) -> list[SpeechHandle] | None:
    """The speeches livekit queued for playout, in the order it plays them.

    ``AgentSession._activity._speech_q``: a heap of ``(-priority, scheduled_ns, handle)``, the
    queue ``AgentActivity.interrupt()`` walks after the current speech. livekit has no public
    view of it (``session.current_speech`` is only its head, once popped). None if livekit
    moved it.
    """
    queue = getattr(getattr(session, "_activity", None), _SPEECH_QUEUE, None)
    if not isinstance(queue, list):
        return None
    try:
        ordered = sorted(queue, key=lambda item: (item[0], item[1]))
        return [item[2] for item in ordered if isinstance(item[2], SpeechHandle)]
    except (TypeError, IndexError):
        return None


def session_closing(session: Any) -> bool:
    """Whether livekit has begun closing ``session`` (``AgentSession._is_closing()``).

    livekit emits ``close`` only at the end of its close (which waits up to
    ``session_close_transcript_timeout`` for the caller's last words); a hang-up asked for in
    between (livekit's ``EndCallTool`` reacting to the farewell interrupted by the close) is not
    the app's decision any more. False if livekit moved it.
    """
    is_closing = getattr(session, "_is_closing", None)
    return bool(is_closing()) if callable(is_closing) else False


_FIRST_UPDATE = "_first_update_fut"


def tool_call_releasable(run_context: Any) -> bool:
    """Whether a ``RunContext.update()`` now would release the running tool call.

    livekit's tool executor answers the call with the first ``update()`` (its
    ``RunContext._first_update_fut``): the turn stops waiting for the tool, and the tool's return
    value arrives later as a deferred reply. A later ``update()`` only adds a progress report, and
    a call run without an executor (``execute_function_call``, mocks) has nothing to release.
    False if livekit moved it.
    """
    first_update = getattr(run_context, _FIRST_UPDATE, None)
    return isinstance(first_update, asyncio.Future) and not first_update.done()


def close_as_caller_left(session: Any) -> bool:
    """Close ``session`` the way RoomIO does when the caller leaves the room.

    RoomIO calls ``AgentSession._close_soon(reason=CloseReason.PARTICIPANT_DISCONNECTED)``; the
    lab has no room, so its caller leaves through this. False if livekit moved it.
    """
    from livekit.agents.voice.events import CloseReason

    close_soon = getattr(session, "_close_soon", None)
    if close_soon is None:
        return False
    close_soon(reason=CloseReason.PARTICIPANT_DISCONNECTED)
    return True


@dataclass(frozen=True)
class Reliance:
    """A livekit-agents fact the library is built on, and the tripwire that pins it.

    Attributes:
        what: The method or behaviour.
        used_by: The library's module that depends on it.
        change: The livekit change that breaks it (the tripwire's failure message).
        tripwire: The test in ``tests/test_compat.py`` that fails when it changes.
    """

    what: str
    used_by: str
    change: str
    tripwire: str


RELIED_ON: tuple[Reliance, ...] = (
    Reliance(
        "AgentSession.shutdown(*, drain=True) -> None",
        "resilient_agent.shutdown",
        "livekit changed AgentSession.shutdown's signature",
        "test_intercepted_methods_keep_their_signatures[AgentSession.shutdown]",
    ),
    Reliance(
        "AgentSession.aclose() -> coroutine",
        "resilient_agent.shutdown",
        "livekit changed AgentSession.aclose's signature",
        "test_intercepted_methods_keep_their_signatures[AgentSession.aclose]",
    ),
    Reliance(
        "JobContext.shutdown(reason='user requested') -> None",
        "resilient_agent.shutdown",
        "livekit changed JobContext.shutdown's signature",
        "test_intercepted_methods_keep_their_signatures[JobContext.shutdown]",
    ),
    Reliance(
        "AgentSession.interrupt(*, force=False) -> Future",
        "resilient_agent.speech_gates",
        "livekit changed AgentSession.interrupt's signature",
        "test_intercepted_methods_keep_their_signatures[AgentSession.interrupt]",
    ),
    Reliance(
        "AgentSession.generate_reply(*, user_input=..., ...) -> SpeechHandle",
        "resilient_agent.handoff_gates",
        "livekit changed AgentSession.generate_reply's signature",
        "test_intercepted_methods_keep_their_signatures[AgentSession.generate_reply]",
    ),
    Reliance(
        "RunContext.disallow_interruptions() -> None",
        "resilient_agent.speech_gates",
        "livekit changed RunContext.disallow_interruptions's signature",
        "test_intercepted_methods_keep_their_signatures[RunContext.disallow_interruptions]",
    ),
    Reliance(
        "Agent.on_enter() / Agent.on_exit() -> None, called by attribute on the agent",
        "resilient_agent.supervision",
        "livekit changed Agent.on_enter's signature (or no longer calls it by attribute)",
        "test_intercepted_methods_keep_their_signatures[Agent.on_enter]",
    ),
    Reliance(
        "Agent.on_exit() -> None, called by attribute on the agent",
        "resilient_agent.supervision",
        "livekit changed Agent.on_exit's signature",
        "test_intercepted_methods_keep_their_signatures[Agent.on_exit]",
    ),
    Reliance(
        "Agent.on_user_turn_completed(turn_ctx, new_message), called by attribute",
        "resilient_agent.supervision",
        "livekit changed Agent.on_user_turn_completed's signature",
        "test_intercepted_methods_keep_their_signatures[Agent.on_user_turn_completed]",
    ),
    Reliance(
        "Agent.llm_node(chat_ctx, tools, model_settings); livekit executes the tools the node "
        "leaves in its list",
        "resilient_agent.supervision",
        "livekit changed Agent.llm_node's signature",
        "test_intercepted_methods_keep_their_signatures[Agent.llm_node]",
    ),
    Reliance(
        "Agent.on_user_turn_exceeded(ev), called by attribute when user_turn_limit is reached",
        "resilient_agent.cut_in",
        "livekit changed Agent.on_user_turn_exceeded's signature",
        "test_intercepted_methods_keep_their_signatures[Agent.on_user_turn_exceeded]",
    ),
    Reliance(
        "a non-forced interrupt() raises RuntimeError on a protected speech",
        "resilient_agent.speech_gates (decide_interrupt)",
        "livekit no longer raises when interrupt() meets a protected speech",
        "test_interrupt_raises_on_a_protected_speech",
    ),
    Reliance(
        "protecting an interrupted speech raises RuntimeError",
        "middleware.tool_guard (decide_protection)",
        "livekit no longer refuses to protect an interrupted speech",
        "test_protecting_an_interrupted_speech_raises",
    ),
    Reliance(
        "disallow_interruptions() resumes a speech livekit paused for the caller, "
        "synchronously (since 1.8.0)",
        "resilient_agent.speech_gates (decide_resume), middleware.wait_for_caller",
        "livekit no longer resumes a paused speech inside disallow_interruptions()",
        "test_disallow_interruptions_resumes_a_paused_speech_at_once",
    ),
    Reliance(
        "AgentSession._is_closing() tells a close livekit began before its close event",
        "resilient_agent.shutdown",
        "livekit moved AgentSession._is_closing",
        "test_session_closing_is_where_compat_expects_it",
    ),
    Reliance(
        "RunContext._first_update_fut is the executor's pending answer to a running tool call: "
        "the first RunContext.update() answers it (the turn stops waiting for the tool)",
        "middleware.tool_guard (releasing a tool whose speech the caller interrupted)",
        "livekit moved RunContext._first_update_fut",
        "test_tool_call_releasable_is_where_compat_expects_it",
    ),
    Reliance(
        "AgentSession._activity._speech_q is livekit's playout queue, a heap of (-priority, "
        "scheduled_ns, handle) that AgentActivity.interrupt() walks after the current speech",
        "resilient_agent.speech_gates (a deferred interrupt interrupts the queue)",
        "livekit moved AgentActivity._speech_q",
        "test_queued_speeches_is_where_compat_expects_it",
    ),
    Reliance(
        "livekit's own closes (caller left, fatal error, job shutdown callback) do not call "
        "AgentSession.shutdown()",
        "resilient_agent.shutdown",
        "livekit now closes the session through AgentSession.shutdown() on its own",
        "test_livekit_closes_on_its_own_without_shutdown",
    ),
    Reliance(
        "EndCallTool calls session.shutdown() from the done callback of the tool's speech, "
        "whose tool reply (the goodbye) is the same handle, and job_ctx.shutdown() on close",
        "resilient_agent.shutdown, resilient_agent.tools (toolsets)",
        "livekit changed how EndCallTool ends the call",
        "test_end_call_tool_hangs_up_from_its_speech_done_callback",
    ),
    Reliance(
        "AudioInput.__aiter__ returns the input itself, so the session's `async for` over "
        "session.input.audio calls the input's class's __anext__ for every frame",
        "resilient_agent.session_audio (observing the caller's audio in place)",
        "livekit no longer reads an audio input through its class's own __anext__",
        "test_an_audio_input_is_read_through_its_own_class",
    ),
    Reliance(
        "the AgentInput.audio setter calls on_detached() on the input it replaces, before it "
        "stores the new one",
        "resilient_agent.session_audio (following a replaced input)",
        "livekit no longer detaches the audio input it replaces",
        "test_replacing_the_audio_input_detaches_the_old_one",
    ),
)
"""Every livekit method the library intercepts and every livekit behaviour it relies on."""
