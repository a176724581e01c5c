"""Whether the caller's line carries a voice, where ``user_state`` cannot tell.

On a realtime model whose server detects turns, ``user_state`` follows the server's events:
Gemini Live reports the caller speaking whenever its own reply begins, and no model hears the
caller while livekit withholds their audio. :class:`CallerVoice` reads the caller's own audio
instead, through the session's audio observation: every ``LOOK_EVERY_S`` it measures a frame and
stamps :attr:`~resilient_agent._engine.state.ConversationState.caller_voiced_at` when its level is
above ``FLOOR_RMS`` (the Watchdog's floor for a line that carries a caller). It listens only while
the active agent runs a realtime model (:meth:`CallerVoice.follow`); ``RealtimeInputHold`` reads it
too.
"""

from __future__ import annotations

import time

from livekit import rtc

from .._engine.audio import ModelInputHold
from .._engine.state import ConversationState
from .loudness import frame_mean_square
from .session_audio import SessionAudio

__all__ = ["FLOOR_RMS", "LOOK_EVERY_S", "CallerVoice"]

FLOOR_RMS = 300.0
"""Below this int16 RMS (about -40 dBFS) the line carries no caller."""
LOOK_EVERY_S = 0.05
"""A caller's voice lasts far longer than this: one look per 50 ms is enough."""


class CallerVoice:
    """Stamps the conversation state when the caller's line carries a voice.

    Args:
        state: The session's conversation state.
    """

    def __init__(self, state: ConversationState, audio: SessionAudio) -> None:
        self._state = state
        self._audio = audio
        self._looked_at = float("-inf")

    def follow(self, model_input: ModelInputHold | None) -> None:
        """Listen while the active agent runs a realtime model, whose input may be held.

        Its ``user_state`` is the server's word when the server detects turns, and the model
        hears nothing of the caller while its input is held.
        """
        self._state.server_turns = model_input is not None and model_input.server_detects_turns
        if model_input is not None and model_input.available:
            self._audio.observe(self.on_frame)
        else:
            self._audio.stop_observing(self.on_frame)

    def on_frame(self, frame: rtc.AudioFrame, now: float) -> None:
        """Measure ``frame`` if the last look is old enough (the audio observer's callback)."""
        if now - self._looked_at < LOOK_EVERY_S:
            return
        self._looked_at = now
        level = frame_mean_square(frame)
        if level is not None and level > FLOOR_RMS * FLOOR_RMS:
            self._state.caller_voiced_at = time.time()
