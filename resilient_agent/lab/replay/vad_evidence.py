"""A VAD that failed in the recorded call, read from the report's turn ends and the recording.

livekit records no event of its VAD failing; what a report and recording carry instead:

- **a turn's end the VAD did not make**: livekit dates a turn's end from the VAD back to the
  caller's last sound (its ``END_OF_SPEECH`` minus the silence it waited on), so a VAD's end
  comes where the recording's caller channel went quiet. A turn whose end (``user_state_changed``
  to ``listening``) comes well after that, with no sound of the caller's in between, was ended
  by something else (an agent's recovery switching the audio input off and on, or restarting
  the VAD): the VAD held it open;
- **how it held it**, by the user message's ``stopped_speaking_at`` (livekit's last-speaking
  anchor, from the VAD's inferences): before the recording's caller stopped, while they went on
  speaking, the VAD stopped hearing (it died then); at the turn's end, the VAD heard speech in
  the silence until the turn was ended (stuck); in between, or with no metrics (a message an
  agent merged), it heard the silence and never ended the turn (its end of speech was lost).

The replay's VAD fails the same way in that turn (the lab's :class:`~...testing.vad.VADFault`),
so the agent recovers, or does not, as it did; the turn's words are said where the recording
has the caller, not over the silence the VAD held. Read only from recordings the lab's energy
VAD heard: the level is what that VAD decides on (livekit's Silero ends a turn on its own
reading of the voice), and only that VAD can be made to fail.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ...testing.audio import FRAME_SECONDS
from ...testing.vad import SILENCE_TO_END_SPEECH, VADFault, VADFaultMode
from .plan import CallerTurn, ReplayPlan
from .recording import ReplayRecording
from .typed_claims import voiced_frames

__all__ = ["VADFailure", "ringing", "vad_failure", "with_vad_evidence"]

# a turn's end this long after the caller's last sound was not the VAD's: a VAD ends a turn
# after its silence window, dated back to that sound (a frame of margin for Opus's ringing)
_LATE_END_S = SILENCE_TO_END_SPEECH + 0.1
# livekit's VAD anchors and a turn's start agree within a frame (the report rounds to a ms)
_SAME_S = FRAME_SECONDS + 1e-3
# the VAD's last inference before a turn's end it did not make: it infers every 3 frames
_INFERENCE_S = 3 * FRAME_SECONDS + 1e-3


@dataclasses.dataclass(frozen=True)
class VADFailure:
    """How the VAD failed in one caller turn, and the evidence.

    Attributes:
        turn: The turn's index.
        mode: How it failed (the lab's :data:`~...testing.vad.VADFaultMode`).
        quiet_from: Call seconds when the recording's caller went quiet in the turn.
        stopped: livekit's ``stopped_speaking_at`` for the turn, None when its message has none.
        after: For ``dead``: seconds of the turn's speech the VAD heard before it died.
    """

    turn: int
    mode: VADFaultMode
    quiet_from: float
    stopped: float | None
    after: float = 0.0

    def assumption(self, end: float) -> str:
        """The ``assumed:`` line for a turn that ended at ``end``."""
        evidence = (
            f"the caller's turn ended at {end:.2f} s, {end - self.quiet_from:.2f} s after the "
            f"recording's caller went quiet ({self.quiet_from:.2f} s) with no sound of theirs "
            "in between: the VAD did not end it (livekit dates a VAD's end back to the last sound)"
        )
        if self.mode == "dead":
            how = (
                f"livekit's VAD last heard them at {self.stopped:.2f} s (stopped_speaking_at) "
                "while the recording has them speaking on: it died then; the replay's VAD dies "
                f"{self.after:.2f} s into the turn"
            )
        elif self.mode == "stuck":
            how = (
                f"livekit's VAD heard speech until {self.stopped:.2f} s (stopped_speaking_at), "
                "in the silence: it was stuck on speech; the replay's VAD sticks from the turn's "
                "first sound (the report does not say when in it)"
            )
        else:
            anchor = (
                f"livekit's VAD heard them until {self.stopped:.2f} s (stopped_speaking_at)"
                if self.stopped is not None
                else "the user message has no VAD metrics"
            )
            how = (
                f"{anchor}: its end of speech was lost; the replay's VAD loses the turn's end of "
                "speech"
            )
        return (
            f"at {end:.2f} s: {evidence}; {how}, and hears the recording elsewhere; the turn's "
            f"words are said up to {self.quiet_from:.2f} s, and from then to its end the caller "
            "is silent (the recording's Opus rings on below the lab's speech level there, which "
            "the lab's tone did not)"
        )

    def fault(self) -> VADFault:
        """The lab's fault of the replay's VAD, pinned to the turn's utterance by the scenario."""
        return VADFault(self.mode, self.turn, after=self.after)


def vad_failure(
    turns: Sequence[CallerTurn], spans: Sequence[tuple[float, float]], voiced: np.ndarray
) -> VADFailure | None:
    """The first turn whose end the VAD did not make, and how it failed; None if none.

    Args:
        turns: The caller's turns (all ended: a turn that never ended is replayed as such).
        spans: livekit's (``started_speaking_at``, ``stopped_speaking_at``) of each spoken
            user message.
        voiced: The starts (call seconds) of the recording's caller frames that carry speech.
    """
    for index, turn in enumerate(turns):
        if not turn.ended or turn.noise or turn.windows:
            continue
        sound = voiced[(voiced >= turn.start - FRAME_SECONDS) & (voiced < turn.end)]
        if not len(sound):
            continue
        quiet_from = round(float(sound[-1]) + FRAME_SECONDS, 3)
        if turn.end - quiet_from < _LATE_END_S:
            continue  # the VAD's own end, dated back to the last sound
        stopped = next((b for a, b in spans if abs(a - turn.start) <= _SAME_S), None)
        if stopped is not None and stopped < quiet_from - _LATE_END_S:
            heard = round(stopped - turn.start + FRAME_SECONDS, 3)
            return VADFailure(index, "dead", quiet_from, stopped, after=heard)
        if stopped is not None and stopped >= turn.end - _INFERENCE_S:
            return VADFailure(index, "stuck", quiet_from, stopped)
        return VADFailure(index, "no_end_of_speech", quiet_from, stopped)
    return None


def with_vad_evidence(plan: ReplayPlan, recording: ReplayRecording) -> ReplayPlan:
    """``plan`` with the turn its VAD failed in, read from ``recording``, printed as assumed.

    A pipeline call's, heard by the lab's energy VAD, with every turn ended (a turn that never
    ended is replayed with its end of speech lost already). The plan may be given again.
    """
    if (
        plan.vad_fault is not None
        or plan.realtime is not None
        or not recording.lab_vad
        or not all(t.ended for t in plan.turns)
    ):
        return plan
    found = vad_failure(plan.turns, plan.vad_spans, voiced_frames(recording.caller.samples()))
    if found is None:
        return plan
    turns = list(plan.turns)
    turn = turns[found.turn]
    if turn.said is None:
        turns[found.turn] = dataclasses.replace(turn, said=(turn.start, found.quiet_from))
    return dataclasses.replace(
        plan,
        turns=tuple(turns),
        vad_fault=(found.turn, found.fault(), found.quiet_from),
        assumptions=(*plan.assumptions, found.assumption(turn.end)),
    )


def ringing(plan: ReplayPlan) -> tuple[tuple[float, float], ...]:
    """Where the replayed caller is silent: the quiet the failed VAD held, as the call had it.

    The lab's caller is a marker tone with digital silence after it; its recording's Opus rings
    on below the speech level for about 0.05 s, which a level meter judging quiet against the
    caller's voice (ResilientAgent's, at -26 dB) hears as the caller: from their last sound to
    the end of the turn the VAD held, the recording is that ringing and nothing else.
    """
    if plan.vad_fault is None:
        return ()
    failed, _, quiet_from = plan.vad_fault
    return ((quiet_from, plan.turns[failed].end),)
