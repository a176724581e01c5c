"""Saying a fixed line on whatever speaks in the session: a TTS, or a realtime model.

livekit's ``say()`` needs a TTS (the agent's, else the session's) or a realtime model that
supports ``say()`` (``RealtimeCapabilities.supports_say``); a speech-to-speech session without
either raises ("trying to generate speech from text without a TTS model ..."). Every
first-party piece that speaks a line of its own (the farewell of ``end_call_tool`` and
``hang_up_after_farewell``, ``LlmFallback``'s line) speaks it through :func:`speak_line`, which
picks the way the session can:

1. ``say()`` wherever livekit can say it: a TTS, a realtime model with ``say()``, or a session
   without audio output (text only) - exactly what the app would get from ``session.say``;
2. else a reply of the realtime model instructed to say the line word for word and to call no
   tool (``generate_reply(instructions=..., tool_choice="none")``): the model voices it;
3. else nothing can speak it (no TTS, and a model that makes no audio):
   :class:`LineCannotBeSpoken`, naming the fix.
"""

from __future__ import annotations

from typing import Any, Literal

from livekit.agents import Agent, AgentSession, llm
from livekit.agents.utils import is_given
from livekit.agents.voice import SpeechHandle

from .._livekit.protected_lines import protect, server_detects_turns

__all__ = [
    "LineCannotBeSpoken",
    "SpeakingWay",
    "say_exactly",
    "speak_line",
    "speaking_way",
    "way_for",
]

SpeakingWay = Literal["say", "instructed_reply"]
"""How a line is spoken: ``session.say`` or an instructed reply of a realtime model."""

_NO_WAY_FIX = (
    "give the session (or the agent) a TTS, e.g. AgentSession(tts=...), or use a realtime "
    "model that outputs audio"
)


class LineCannotBeSpoken(RuntimeError):
    """The session has no TTS and its model makes no audio: a line of ours cannot be said.

    Attributes:
        what: What was to be said (``"end_call_tool's farewell"``, ...).
    """

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what} cannot be spoken: no TTS and no audio from the model. Fix: {_NO_WAY_FIX}"
        )
        self.what = what


def say_exactly(text: str) -> str:
    """The instructions that make a realtime model say ``text`` and nothing else."""
    return f'Say exactly the following, word for word, and nothing else: "{text}"'


def speaking_way(session: AgentSession[Any], agent: Agent | None = None) -> SpeakingWay | None:
    """How a line can be spoken in ``session`` while ``agent`` is active (None: it cannot).

    Args:
        session: The session.
        agent: The active agent; by default ``session.current_agent``.
    """
    if agent is None:
        agent = session.current_agent
    return way_for(
        agent.tts if is_given(agent.tts) else session.tts,
        agent.llm if is_given(agent.llm) else session.llm,
        has_audio_output=bool(session.output.audio and session.output.audio_enabled),
    )


def way_for(tts: Any, model: Any, *, has_audio_output: bool = True) -> SpeakingWay | None:
    """How a line is spoken with ``tts`` and ``model`` (livekit's own test in ``say()``)."""
    if tts or not has_audio_output:
        return "say"
    if isinstance(model, llm.RealtimeModel):
        if model.capabilities.supports_say:
            return "say"
        if model.capabilities.audio_output:
            return "instructed_reply"
    return None


def speak_line(
    session: AgentSession[Any],
    text: str,
    *,
    allow_interruptions: bool = True,
    what: str = "the line",
) -> SpeechHandle:
    """Speak ``text`` in ``session`` the way it can (see the module's docstring).

    Args:
        session: The session.
        text: The line.
        allow_interruptions: Whether the caller may interrupt it. On a realtime model the
            reply's handle is protected after it is made (livekit ignores the argument under
            server turn detection); what the caller says over it reaches the model afterwards
            with ``RealtimeInputHold``.
        what: What the line is, for the error.

    Raises:
        LineCannotBeSpoken: Nothing in the session can speak it.
    """
    way = speaking_way(session)
    # livekit drops allow_interruptions=False under server turn detection (with a warning); a
    # protected handle is what it honours there
    protect_after = not allow_interruptions and server_detects_turns(session)
    if way == "say":
        if protect_after:
            return protect(session.say(text), "say")
        return session.say(text, allow_interruptions=allow_interruptions)
    if way == "instructed_reply":
        reply = session.generate_reply(instructions=say_exactly(text), tool_choice="none")
        if not allow_interruptions:
            reply.allow_interruptions = False
        return reply
    raise LineCannotBeSpoken(what)
