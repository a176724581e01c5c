"""What the session's own settings say, read through livekit's public API."""

from __future__ import annotations

from typing import Any

from livekit.agents import Agent, AgentSession, stt, utils
from livekit.agents.beta.workflows import TaskGroup
from livekit.agents.voice.speech_handle import SpeechHandle

from resilient_agent import MiddlewareContext

__all__ = [
    "between_group_tasks",
    "handoff_under_way",
    "livekit_min_interruption_words",
    "livekit_turn_delay",
    "session_recognizer",
    "stt_is_withheld",
    "stt_withheld_for",
]


def session_recognizer(agent: Agent, session: AgentSession[Any]) -> stt.STT[Any] | None:
    """The STT that transcribes the caller for ``agent``: its own, else the session's."""
    agent_stt = getattr(agent, "stt", None)
    if utils.is_given(agent_stt) and isinstance(agent_stt, stt.STT):
        return agent_stt
    session_stt = session.stt
    return session_stt if isinstance(session_stt, stt.STT) else None


def livekit_min_interruption_words(session: AgentSession[Any]) -> int:
    """Livekit's ``interruption.min_words``: fewer words over an agent speech do not interrupt."""
    interruption = session.options.turn_handling.get("interruption", {})
    return int(interruption.get("min_words", 0) or 0)


def livekit_turn_delay(session: AgentSession[Any]) -> float:
    """How long livekit may still take to commit a turn after the caller stopped.

    Its endpointing ``min_delay``, or ``max_delay`` when a turn-detector model decides.
    """
    turn_handling = session.options.turn_handling
    endpointing = turn_handling.get("endpointing", {})
    detection = turn_handling.get("turn_detection")
    uses_model = detection is not None and not isinstance(detection, str)
    delay = endpointing.get("max_delay", 3.0) if uses_model else endpointing.get("min_delay", 0.5)
    return float(delay)


def handoff_under_way(ctx: MiddlewareContext) -> bool:
    """Whether livekit is handing the session to another agent (its activity drains).

    ``session.update_agent`` (and an awaited ``AgentTask``) makes the next agent current at
    once, while the context's agent stays the draining one until livekit switches activities
    (its ``agent_handoff`` item). Meanwhile livekit refuses to schedule a reply.
    """
    try:
        return ctx.session.current_agent is not ctx.agent
    except (RuntimeError, AttributeError):  # no agent runs (the session is over), or a stand-in
        return False


def between_group_tasks(ctx: MiddlewareContext) -> bool:
    """Whether a livekit ``TaskGroup`` runs between two of its tasks (its completion callback).

    A ``TaskGroup`` never converses: its next task takes the caller's words. A reply made now
    would run in the group's own activity, without the next task's tools, and that task would
    start from a context without the words.
    """
    try:
        return isinstance(ctx.session.current_agent, TaskGroup)
    except (RuntimeError, AttributeError):  # no agent runs (the session is over), or a stand-in
        return False


def stt_is_withheld(session: AgentSession[Any]) -> bool:
    """Whether livekit feeds the STT silence right now because of uninterruptible speech."""
    return stt_withheld_for(session, session.current_speech)


def stt_withheld_for(session: AgentSession[Any], speech: SpeechHandle | None) -> bool:
    """:func:`stt_is_withheld`, given ``session.current_speech`` read in the same step."""
    if speech is None:
        return False
    return bool(
        not speech.done()
        and not speech.interrupted
        and not speech.allow_interruptions
        and session.options.interruption["discard_audio_if_uninterruptible"]
    )
