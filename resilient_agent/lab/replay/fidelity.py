"""Whether a replay on a plain ``Agent`` did what the recorded call did.

The replayed call is written as livekit's session report and read back into a plan, so both
sides are compared on what livekit reports: the caller's turns (start, end, the words the STT
transcribed), the turns nobody transcribed (words lost), the messages the caller typed (when,
and what reached the chat), what the agent said and when it began each line, which agents took
the call and when (``agent_handoff``), and how the call ended. Every difference is a
:class:`Divergence` with the call time it happened at.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ...testing.audio import FRAME_SECONDS
from .plan import ReplayPlan

__all__ = ["FRAME_TOLERANCE_S", "Divergence", "divergences"]

FRAME_TOLERANCE_S = FRAME_SECONDS + 1e-3
"""Timings agree within one 10 ms frame (and the millisecond the plan rounds to)."""


@dataclass(frozen=True)
class Divergence:
    """One way the replay differs from the recording.

    Attributes:
        at: Call seconds where it shows.
        what: One sentence: what was recorded and what the replay did.
        kind: What differs: ``turns`` (a caller turn's times, or one more or less),
            ``words`` (what the STT heard in a turn), ``typed`` (a typed message's time, or
            what of it reached the chat), ``lines`` (what the agent said), ``handoffs`` or
            ``close``.
        off_by: Seconds a timing is off by (a turn's edge, a line's start), 0 for any other
            difference.
    """

    at: float
    what: str
    kind: str = ""
    off_by: float = 0.0

    def __str__(self) -> str:
        return f"{self.at:7.2f} s  {self.what}"


def divergences(recorded: ReplayPlan, replayed: ReplayPlan) -> list[Divergence]:
    """Every way ``replayed`` differs from ``recorded``, in call order."""
    found: list[Divergence] = []
    for index, pair in enumerate(itertools.zip_longest(recorded.turns, replayed.turns)):
        was, now = pair
        if was is None and now is not None:
            found.append(
                Divergence(now.start, f"caller turn {index + 1}: not in the recording", "turns")
            )
            continue
        if now is None and was is not None:
            found.append(Divergence(was.start, f"caller turn {index + 1}: not replayed", "turns"))
            continue
        assert was is not None and now is not None
        if was.ended != now.ended:
            ends = "never ends" if not now.ended else "ends"
            found.append(
                Divergence(was.start, f"caller turn {index + 1} {ends}, unlike recorded", "turns")
            )
        # a turn that never ended has no end to compare
        for edge in ("start", "end") if was.ended and now.ended else ("start",):
            a, b = getattr(was, edge), getattr(now, edge)
            if abs(a - b) > FRAME_TOLERANCE_S:
                found.append(
                    Divergence(
                        a,
                        f"caller turn {index + 1} {edge}s at {b:.3f} s, not {a:.3f} s",
                        "turns",
                        abs(a - b),
                    )
                )
        heard_was = " ".join(was.heard) or "(nothing)"
        heard_now = " ".join(now.heard) or "(nothing)"
        if heard_was != heard_now:
            found.append(
                Divergence(
                    was.start,
                    f"caller turn {index + 1}: the STT heard {heard_now!r}, not {heard_was!r}",
                    "words",
                )
            )
    found.extend(_typed(recorded, replayed))
    said_was = [text for text, _ in recorded.said]
    said_now = [text for text, _ in replayed.said]
    if said_was != said_now:
        found.append(
            Divergence(replayed.end_at, f"the agent said {said_now!r}, not {said_was!r}", "lines")
        )
    else:
        found.extend(_line_starts(recorded, replayed))
    found.extend(_handoffs(recorded, replayed))
    found.extend(_hang_up(recorded, replayed))
    return sorted(found, key=lambda d: d.at)


def _line_starts(recorded: ReplayPlan, replayed: ReplayPlan) -> list[Divergence]:
    """The agent began each of the same lines within one frame of the recorded time."""
    found: list[Divergence] = []
    # the same lines (the caller compared the texts); a plan built by hand may have no starts
    if len(recorded.said_at) != len(recorded.said) or len(replayed.said_at) != len(recorded.said):
        return found
    lines = zip(recorded.said, recorded.said_at, replayed.said_at, strict=True)
    for number, ((text, _), was, now) in enumerate(lines, start=1):
        line = f"the agent's line {number} ({_short(text)})"
        if was is None and now is None:
            continue
        if was is None or now is None:
            what = "never plays" if now is None else "plays"
            at = was if was is not None else now if now is not None else 0.0
            found.append(Divergence(at, f"{line} {what}, unlike recorded", "lines"))
        elif abs(was - now) > FRAME_TOLERANCE_S:
            found.append(
                Divergence(
                    was, f"{line} begins at {now:.3f} s, not {was:.3f} s", "lines", abs(was - now)
                )
            )
    return found


def _short(text: str) -> str:
    """A line's first words, enough to know it."""
    words = text.split()
    return repr(" ".join(words[:6]) + (" ..." if len(words) > 6 else ""))


def _typed(recorded: ReplayPlan, replayed: ReplayPlan) -> list[Divergence]:
    """The caller typed the same messages, each within one frame, and the same reached the chat.

    A message that never reached the chat is typed again as a placeholder: only whether it
    reached the chat is compared, not its words.
    """
    found: list[Divergence] = []
    pairs = itertools.zip_longest(recorded.typed, replayed.typed)
    for number, (was, now) in enumerate(pairs, start=1):
        if was is None or now is None:
            at = was.at if was is not None else now.at if now is not None else 0.0
            what = "not in the recording" if was is None else "not typed in the replay"
            found.append(Divergence(at, f"typed message {number}: {what}", "typed"))
            continue
        if abs(was.at - now.at) > FRAME_TOLERANCE_S:
            found.append(
                Divergence(
                    was.at,
                    f"typed message {number} arrived at {now.at:.3f} s, not {was.at:.3f} s",
                    "typed",
                )
            )
        if was.text != now.text and (was.text is None or now.text is None):
            reached = "reached the chat" if now.text is not None else "was lost"
            found.append(
                Divergence(was.at, f"typed message {number} {reached}, unlike recorded", "typed")
            )
        elif was.text != now.text:
            found.append(
                Divergence(
                    was.at,
                    f"typed message {number}: the chat has {now.text!r}, not {was.text!r}",
                    "typed",
                )
            )
    return found


def _handoffs(recorded: ReplayPlan, replayed: ReplayPlan) -> list[Divergence]:
    """The agents took the call in the recorded order, each within one frame of its time."""
    was = [(h.old, h.new) for h in recorded.handoffs]
    now = [(h.old, h.new) for h in replayed.handoffs]
    if was != now:
        at = recorded.handoffs[0].at if recorded.handoffs else replayed.end_at
        for a, b in zip(recorded.handoffs, replayed.handoffs, strict=False):
            if (a.old, a.new) != (b.old, b.new):
                at = a.at
                break
        what = f"the agents took the call as {_chain(now)}, not {_chain(was)}"
        return [Divergence(at, what, "handoffs")]
    return [
        Divergence(a.at, f"{b.new} took the call at {b.at:.3f} s, not {a.at:.3f} s", "handoffs")
        for a, b in zip(recorded.handoffs, replayed.handoffs, strict=True)
        if abs(a.at - b.at) > FRAME_TOLERANCE_S
    ]


def _chain(handoffs: list[tuple[str | None, str]]) -> str:
    return " -> ".join(new for _, new in handoffs) or "(no handoff)"


def _hang_up(recorded: ReplayPlan, replayed: ReplayPlan) -> list[Divergence]:
    at = recorded.close_at if recorded.close_at is not None else recorded.end_at
    if recorded.close_reason != replayed.close_reason:
        return [
            Divergence(
                at,
                f"the session closed for {replayed.close_reason}, not {recorded.close_reason}",
                "close",
            )
        ]
    if (
        recorded.close_at is not None
        and replayed.close_at is not None
        and abs(recorded.close_at - replayed.close_at) > FRAME_TOLERANCE_S
    ):
        return [
            Divergence(
                at,
                f"the session closed at {replayed.close_at:.3f} s, not {recorded.close_at:.3f} s",
                "close",
            )
        ]
    return []
