"""A caller's turn that a typed message's claim ended while the recording has them speaking on.

RoomIO's text input claims the caller's turn while it interrupts the agent and asks for a reply
(see :mod:`.typed`); as it releases the claim livekit takes the caller's state from the VAD's
last word on it, and a pause of a quarter second (half livekit's ``min_endpointing_delay``) is
enough for ``listening``. A message typed in such a pause, while the caller talks over the agent,
ends their turn there, though they go on speaking right after it: the VAD's speech segment goes
on (it ends a segment only after 0.55 s of silence) and reports no new turn. The report then has
a turn that ends in a pause shorter than any VAD ends a turn in, with the caller's speech on the
recording going on past it, and no turn of theirs until that speech ends.

- when a typed message is read there (its reply asked for as the turn ended), that was its end;
- when nothing is (no reply asked for, no other agent took the call), while the agent spoke a
  line that played on: livekit refused the message (the line was protected, and its
  ``interrupt()`` raised): its claim is all the report has of it, and it is typed again as a
  placeholder, printed as ``assumed:``.

Either way the turn's words are said where the recording has the caller speaking, before the
claim and after it (:attr:`~.plan.CallerTurn.windows`), not over the pause, which the replayed
VAD must hear as the recorded one did for the replayed claim to end the turn there too.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...testing.audio import FRAME_SAMPLES, FRAME_SECONDS, RECORDED_SPEECH_LEVEL
from ...testing.vad import SILENCE_TO_END_SPEECH
from .plan import CallerTurn, ReplayPlan
from .recording import ReplayRecording
from .typed import TypedMessage

__all__ = ["voiced_frames", "with_recorded_claims"]

# a claim and what happened in its instant: a report rounds its times to the millisecond, and a
# replay's clock runs a frame's fraction off the recorded one
_SAME_INSTANT_S = FRAME_SECONDS + 1e-3


def with_recorded_claims(plan: ReplayPlan, recording: ReplayRecording) -> ReplayPlan:
    """``plan`` with its turns a typed message's claim ended read from ``recording``.

    A pipeline call's only (a realtime model's server ends its caller's turns). A refused
    message (none read at the turn's end) is inferred only from a recording the lab's energy VAD
    heard: the level is what that VAD decides on, not what livekit's Silero does. A turn already
    said in windows is left as it is, so the plan may be given again.
    """
    # the turns whose end a claim may explain, by the events: the recording is read for them
    claimed = {
        index: any(abs(m.at - turn.end) <= _SAME_INSTANT_S for m in plan.typed)
        for index, turn in enumerate(plan.turns)
        if turn.ended and not turn.noise and not turn.windows
    }
    candidates = {
        index: was
        for index, was in claimed.items()
        if was or _refused_there(plan, plan.turns[index].end)
    }
    if plan.realtime is not None or not candidates:
        return plan
    voiced = voiced_frames(recording.caller.samples())
    turns = list(plan.turns)
    typed = list(plan.typed)
    assumptions = list(plan.assumptions)
    for index, was_claimed in candidates.items():
        if not was_claimed and not recording.lab_vad:
            # the level tells speech as the lab's energy VAD hears it; livekit's Silero decides
            # on its own and may end a turn in a loud stretch: without a message read there,
            # that is no evidence of a claim
            continue
        turn = plan.turns[index]
        after = plan.turns[index + 1].start if index + 1 < len(plan.turns) else None
        went_on = _speech_around(turn, voiced, after)
        if went_on is None:
            continue
        before, resumed, stopped = went_on
        if not was_claimed:
            typed.append(TypedMessage(turn.end, None))
            assumptions.append(
                f"at {turn.end:.2f} s: the caller's turn ended in a {resumed - before:.2f} s "
                f"pause (no VAD ends a turn in one) while the agent's line played on, and the "
                f"recording has them speaking on to {stopped:.2f} s with no turn of theirs: a "
                "typed message's claim on the turn (RoomIO's text input), which livekit refused "
                "(no reply was asked for); typed again as one placeholder word"
            )
        turns[index] = dataclasses.replace(
            turn, windows=_windows(turn, (turn.start, before), (resumed, stopped))
        )
        assumptions.append(
            f"at {turn.end:.2f} s: the caller's words of the turn the typed message's claim "
            f"ended are said where the recording has them speaking ({turn.start:.2f}-"
            f"{before:.2f} s, {resumed:.2f}-{stopped:.2f} s), not over the pause it ended in"
        )
    if turns == list(plan.turns):
        return plan
    return dataclasses.replace(
        plan,
        turns=tuple(turns),
        typed=tuple(sorted(typed, key=lambda m: m.at)),
        assumptions=tuple(assumptions),
    )


def voiced_frames(samples: np.ndarray) -> np.ndarray:
    """The starts (seconds) of the recorded caller frames that carry speech, in order."""
    frames = len(samples) // FRAME_SAMPLES
    levels = np.abs(samples[: frames * FRAME_SAMPLES].astype(np.int32)).reshape(
        frames, FRAME_SAMPLES
    )
    return np.flatnonzero(levels.mean(axis=1) > RECORDED_SPEECH_LEVEL) * FRAME_SECONDS


def _speech_around(
    turn: CallerTurn, voiced: np.ndarray, next_start: float | None
) -> tuple[float, float, float] | None:
    """Where the caller's speech paused at ``turn``'s end, resumed and stopped, if it went on.

    None unless the turn ended in a pause shorter than a VAD ends a turn in, inside the turn's
    speech, and the speech after it went on (pauses that short joined) before any next turn.
    """
    end = turn.end
    earlier = voiced[(voiced >= turn.start - FRAME_SECONDS) & (voiced < end)]
    later = voiced[voiced >= end]
    if not len(earlier) or not len(later):
        return None
    before = float(earlier[-1]) + FRAME_SECONDS
    resumed = float(later[0])
    if before > end + 1e-6 or resumed - before >= SILENCE_TO_END_SPEECH:
        return None  # ended in speech (a claim then keeps the turn), or a pause a VAD ends
    gaps = np.flatnonzero(np.diff(later) >= SILENCE_TO_END_SPEECH)
    stopped = float(later[gaps[0]] if len(gaps) else later[-1]) + FRAME_SECONDS
    if next_start is not None and next_start < stopped - _SAME_INSTANT_S:
        return None  # a turn of theirs began in it: the VAD heard the speech go on
    return round(before, 3), round(resumed, 3), round(stopped, 3)


def _refused_there(plan: ReplayPlan, at: float) -> bool:
    """Whether a refused claim explains a turn's end at ``at``, and nothing else does.

    The agent spoke from before it to after it (a line that played on: livekit refused to
    interrupt it), and no other agent took the call then (livekit's new agent ends the caller's
    turn as it starts).
    """
    speaking = any(
        a < at - _SAME_INSTANT_S and at + _SAME_INSTANT_S < b for a, b in plan.agent_speaking
    )
    handed = any(abs(h.at - at) <= _SAME_INSTANT_S for h in plan.handoffs)
    return speaking and not handed


def _windows(turn: CallerTurn, *spans: tuple[float, float]) -> tuple[tuple[float, float, int], ...]:
    """``turn``'s words over ``spans``, each its share by length (one word at least each)."""
    words = turn.unheard + len(turn.heard) + turn.unheard_after
    if words < len(spans):
        return ((spans[0][0], spans[-1][1], words),)
    total = sum(b - a for a, b in spans)
    windows: list[tuple[float, float, int]] = []
    left = words
    for number, (a, b) in enumerate(spans):
        rest = len(spans) - number - 1
        count = left if not rest else min(left - rest, max(1, round(words * (b - a) / total)))
        windows.append((a, b, count))
        left -= count
    return tuple(windows)
