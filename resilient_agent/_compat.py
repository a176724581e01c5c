"""Every private livekit-agents name the project touches, in one place (tested in test_compat).

Private names change between minor releases. Each accessor here degrades to None instead of
raising, and ``tests/test_compat.py`` fails loudly when livekit moves one, so an upgrade is
caught by CI, not by a caller.
"""

from __future__ import annotations

import asyncio
from typing import Any

from livekit.agents.voice.speech_handle import SpeechHandle

__all__ = ["speech_interrupted_future", "speech_scheduled_future"]


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
