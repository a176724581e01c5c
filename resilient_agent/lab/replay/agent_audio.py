"""What the recording's agent channel evidences that the report's events do not: a silent line.

A TTS that returns silence raises nothing: livekit plays it and records the line as said in
full, with no ``error`` event. livekit's recorder writes the agent's played audio on the
recording's second channel, where it played: a line the agent spoke (``agent_state_changed``
to speaking, its assistant message added as it stopped) over a channel that stayed silent
throughout was synthesized as silence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...testing.audio import SAMPLE_RATE
from .faults import sentence_count

__all__ = ["SilentLine", "silent_line"]

# the edges of a line's speaking time that may hold no audio of it (a frame's placing, Opus's
# ringing): the rest of it is judged
_EDGE_S = 0.1
# shorter than this, a line's speaking time is not judged
_SHORTEST_S = 0.3
# an int16 level no spoken audio stays under (about -50 dBFS): below it, silence
_SILENCE_LEVEL = 100


@dataclass(frozen=True)
class SilentLine:
    """A line the agent spoke with no audio on the recording's agent channel.

    Attributes:
        at: Call seconds when the agent began to speak it.
        text: The line.
        sentence: Its first sentence, counted in the call's order from 1 as livekit gives
            sentences to the TTS.
    """

    at: float
    text: str
    sentence: int


def silent_line(events: Sequence[Any], agent: np.ndarray, offset: float) -> SilentLine | None:
    """The first line the report says the agent spoke that the agent channel has no audio of.

    Args:
        events: The report's events (checked by :func:`~.plan.load_plan`).
        agent: The recording's agent channel at the lab's rate.
        offset: The call second of its first sample.
    """
    t0 = float(events[0]["created_at"])
    speaking: list[list[float]] = []  # [began, stopped] (stopped inf while it speaks)
    lines: list[tuple[float, str, bool]] = []  # (added, text, interrupted)
    for event in events:
        at = float(event["created_at"]) - t0
        if event.get("type") == "agent_state_changed":
            if event.get("new_state") == "speaking":
                speaking.append([at, math.inf])
            elif speaking and speaking[-1][1] == math.inf:
                speaking[-1][1] = at
        elif event.get("type") == "conversation_item_added":
            item = event.get("item")
            if isinstance(item, Mapping) and item.get("role") == "assistant":
                text = " ".join(c for c in item.get("content", ()) if isinstance(c, str))
                lines.append((at, text, bool(item.get("interrupted"))))
    for index, (added, text, interrupted) in enumerate(lines):
        # livekit adds a line's message as the agent stops speaking it
        spoken = next((s for s in speaking if abs(s[1] - added) <= 1e-3), None)
        if interrupted or spoken is None:
            continue
        if _silent(agent, spoken[0] - offset, spoken[1] - offset):
            before = [t for _, t, _ in lines[:index]]
            return SilentLine(round(spoken[0], 3), text, sentence_count(before) + 1)
    return None


def _silent(agent: np.ndarray, start: float, end: float) -> bool:
    """Whether the agent channel is silent from ``start`` to ``end`` (its seconds), edges aside."""
    if end - start < _SHORTEST_S:
        return False
    first = max(0, round((start + _EDGE_S) * SAMPLE_RATE))
    last = min(len(agent), round((end - _EDGE_S) * SAMPLE_RATE))
    if last <= first:
        return False
    return bool(np.abs(agent[first:last].astype(np.int32)).max() < _SILENCE_LEVEL)
