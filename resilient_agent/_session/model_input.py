"""Holding a realtime model's audio input, and sending it what was kept once the hold ends.

livekit feeds a realtime (speech-to-speech) model silence in place of the caller's audio while a
protected speech is current (``discard_audio_if_uninterruptible``, ``AgentActivity.push_audio``),
as it feeds the STT on the pipeline path. A model has no STT to re-transcribe the words with,
and its server's VAD hears that silence as the end of the caller's turn. :class:`ModelInput`
lets a middleware hold the input instead: while held, nothing livekit pushes reaches the model
(its audio stream pauses, so its VAD hears neither an end of turn nor a barge-in), the frames
the middleware keeps are queued, and at the release they are sent to the model in order, before
the next live frame.

The model's ``RealtimeSession.push_audio`` is shadowed on the instance for the length of a
hold only (:data:`~resilient_agent._livekit.interception.INTERCEPTIONS`); the session is the active
agent's, through the public ``Agent.realtime_llm_session``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from livekit import rtc
from livekit.agents import Agent, llm

from .._livekit.interception import Interceptor

__all__ = ["ModelInput", "realtime_session_of"]


def realtime_session_of(agent: Agent) -> llm.RealtimeSession[Any] | None:
    """The realtime model session ``agent`` runs on, or None (a pipeline, or not running)."""
    try:
        return agent.realtime_llm_session
    except RuntimeError:
        return None


class ModelInput:
    """One session's realtime model input: held and kept on request, sent on release.

    Args:
        active_agent: Returns the agent active now (the context's ``agent``).
    """

    def __init__(self, active_agent: Callable[[], Agent]) -> None:
        self._active_agent = active_agent
        self._interceptor: Interceptor | None = None
        self._model: llm.RealtimeSession[Any] | None = None
        self._kept: list[rtc.AudioFrame] = []

    @property
    def available(self) -> bool:
        """Whether the active agent runs on a realtime model (there is an input to hold)."""
        return realtime_session_of(self._active_agent()) is not None

    @property
    def server_detects_turns(self) -> bool:
        """Whether the model's server detects the caller's turns (its events set ``user_state``).

        Then ``user_state`` is the server's word, not a local VAD's: Gemini Live, for one,
        reports the caller speaking while its own reply plays.
        """
        model = realtime_session_of(self._active_agent())
        return model is not None and model.realtime_model.capabilities.turn_detection

    @property
    def held(self) -> bool:
        """Whether the input is held now."""
        return self._interceptor is not None

    def hold(self) -> bool:
        """Stop what livekit pushes from reaching the model; False if there is no model.

        Holding a held input does nothing (and returns True).
        """
        if self._interceptor is not None:
            return True
        model = realtime_session_of(self._active_agent())
        if model is None:
            return False
        interceptor = Interceptor()
        interceptor.install("RealtimeSession.push_audio", model, _swallowed)
        self._interceptor, self._model = interceptor, model
        return True

    def keep(self, frame: rtc.AudioFrame) -> None:
        """Queue ``frame`` for the model, sent at the release (nothing happens when not held)."""
        if self._interceptor is not None:
            self._kept.append(frame)

    def kept(self) -> list[rtc.AudioFrame]:
        """The frames kept so far in this hold, in order (a copy)."""
        return list(self._kept)

    def release(self, *, send: bool = True) -> int:
        """End the hold: the kept frames go to the model, in order; returns how many.

        Args:
            send: False drops the kept frames (the session is ending: no model to hear them).
        """
        interceptor, model = self._interceptor, self._model
        kept, self._kept = self._kept, []
        self._interceptor = self._model = None
        if interceptor is None or model is None:
            return 0
        interceptor.restore_all()
        if not send:
            return 0
        for frame in kept:
            model.push_audio(frame)
        return len(kept)


def _swallowed(_original: Callable[..., Any]) -> Callable[[rtc.AudioFrame], None]:
    def push_audio(frame: rtc.AudioFrame) -> None:
        # held: livekit's frame (silence, while it withholds the caller) is not the model's
        return None

    return push_audio
