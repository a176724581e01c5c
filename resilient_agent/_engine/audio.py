"""What the chain is given of the caller's audio: frames as they pass, and a realtime model's input.

The session (:mod:`resilient_agent._session`) implements both; the engine names them here so
that the context (:mod:`.state`) types its fields without importing the session's modules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from livekit import rtc

__all__ = ["FrameCallback", "ModelInputHold"]

FrameCallback = Callable[[rtc.AudioFrame, float], None]
"""Called with each frame of caller audio and the loop time it passed at."""


class ModelInputHold(Protocol):
    """One session's realtime model input, held and kept on request, sent on release.

    :class:`resilient_agent._session.model_input.ModelInput` is the session's implementation.
    """

    @property
    def available(self) -> bool:
        """Whether the active agent runs on a realtime model (there is an input to hold)."""
        ...

    @property
    def server_detects_turns(self) -> bool:
        """Whether the model's server detects the caller's turns (its events set ``user_state``)."""
        ...

    @property
    def session(self) -> object | None:
        """The active agent's realtime model session, or None (livekit may hand it on)."""
        ...

    @property
    def held(self) -> bool:
        """Whether the input is held now."""
        ...

    def hold(self) -> bool:
        """Stop what livekit pushes from reaching the model; False if there is no model."""
        ...

    def keep(self, frame: rtc.AudioFrame) -> None:
        """Queue ``frame`` for the model, sent at the release."""
        ...

    def kept(self) -> list[rtc.AudioFrame]:
        """The frames kept so far in this hold, in order (a copy)."""
        ...

    def release(self, *, send: bool = True) -> int:
        """End the hold: the kept frames go to the model, in order; returns how many."""
        ...
