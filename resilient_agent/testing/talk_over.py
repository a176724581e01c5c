"""The talk-over measure: protected speech that began or resumed over a speaking caller."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .clock import SAME_INSTANT_S

if TYPE_CHECKING:
    from .runner import CallWorld

__all__ = ["TalkOver", "protected_talk_over"]


@dataclass(frozen=True)
class TalkOver:
    """A protected speech that began, or resumed after a pause, while the caller was speaking.

    Attributes:
        utterance: Index of the utterance under way when the speech's audio began or resumed.
        began_at: Call seconds when livekit began to play the speech (``playback_started``), or
            when its audio resumed.
        seconds: Seconds of the speech that played from then until the caller stopped.
        on: ``start`` when its audio began over the caller, ``resume`` when it resumed over them.
    """

    utterance: int
    began_at: float
    seconds: float
    on: Literal["start", "resume"] = "start"


def protected_talk_over(world: CallWorld) -> list[TalkOver]:
    """Every protected segment that began or resumed over a speaking caller, and how much played.

    A segment's audio begins at its ``playback_started`` and resumes after each pause (the
    speaker's ``on_resumed``, recorded in ``CallRecorder.resumes``); it is protected at such an
    instant when the speech livekit was playing disallowed interruptions then. The caller is
    speaking when the instant falls inside an utterance. Per segment and utterance, what counts
    is the audio that actually played (pauses excluded) from the first such protected instant
    until the utterance ended.
    """
    found = []
    for segment in world.audio_out.segments:
        if segment.started_at is None:
            continue
        owner = None
        for start in world.recorder.playouts:
            if start.at <= segment.started_at + SAME_INSTANT_S:
                owner = start
        starts: list[tuple[float, Literal["start", "resume"]]] = []
        if owner is not None and owner.allow_interruptions is False:
            starts.append((segment.started_at, "start"))
        ended_at = segment.ended_at if segment.ended_at is not None else math.inf
        starts += [
            (resume.at, "resume")
            for resume in world.recorder.resumes
            if segment.started_at <= resume.at <= ended_at + SAME_INSTANT_S
            and resume.allow_interruptions is False
        ]
        for index, utterance in enumerate(world.scenario.utterances):
            inside = [(at, on) for at, on in starts if utterance.start < at < utterance.end]
            if not inside:
                continue
            at, on = min(inside)
            heard = segment.heard_between(at, utterance.end)
            found.append(TalkOver(index, round(at, 3), round(heard, 3), on))
    return found
