"""A caller's turn livekit's ``user_turn_limit`` cut into, and where its words were said.

With ``turn_handling={"user_turn_limit": {"max_words": N}}`` livekit counts the words of the
final transcripts since the agent last began to speak (or a turn was committed) and, at the
final that reaches ``N``, commits the caller's words so far and asks for an uninterruptible
reply (``Agent.on_user_turn_exceeded``'s default) while the caller still speaks. livekit then
withholds the rest of the turn from the STT: a middleware that recovers it (``ResilientAgent``)
commits those words later, as a message of their own no transcript has.

The report does not carry the option (its ``options`` leave ``turn_handling`` out, and
``UserTurnExceededEvent`` is not a session event), but it shows the cut: a user message
committed inside a VAD turn at one of its final transcripts, a ``generate_reply`` speech
created with it, and its answer not interrupted. The replay gives its session the limit the
count reached there, and says the turn's words where they were said: each final's words
where its interim transcripts put them, so the finals come when they came, and the words said
over the cut-in after it (the recovered message's, or placeholders at the pace of the
transcribed ones), where livekit withheld them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["TurnCut", "cut_into", "word_count_by"]

# two report stamps of one livekit step (a commit and the speech it asked for) are this close
_SAME_STEP_S = 1e-3


@dataclass(frozen=True)
class TurnCut:
    """How livekit's ``user_turn_limit`` cut into one caller turn.

    Attributes:
        at: Seconds when the turn's words so far were committed and the cut-in asked for.
        transcribed: How many of the turn's transcribed words came before the cut.
        windows: Where the transcribed words were said: (start, end, how many), one per final
            transcript, in order.
    """

    at: float
    transcribed: int
    windows: tuple[tuple[float, float, int], ...]

    def words_over(self, end: float, known: int) -> tuple[float, float, int] | None:
        """Where the words said over the cut-in go: from the cut to the turn's ``end``.

        Args:
            end: When the turn ended.
            known: How many words the chat has of them (a middleware recovered them); 0
                counts them at the pace of the transcribed words.
        """
        if end <= self.at:
            return None
        end = round(end, 3)
        if known:
            return (self.at, end, known)
        spoken = sum(b - a for a, b, _ in self.windows)
        words = sum(n for _, _, n in self.windows)
        count = round((end - self.at) * words / spoken) if spoken > 0 else 0
        return (self.at, end, count) if count else None


def cut_into(
    start: float,
    end: float,
    heard: Sequence[str],
    transcripts: Sequence[tuple[float, int, bool]],
    commits: Sequence[tuple[float, str]],
    replies: Sequence[float],
    uninterrupted: Sequence[float],
) -> TurnCut | None:
    """The cut livekit's turn limit made into the turn, if it made one.

    Args:
        start: When the turn started.
        end: When it ended.
        heard: Its transcribed words (its finals'), in order.
        transcripts: Its transcripts: (seconds, how many words, final).
        commits: The caller's messages the events added: (seconds, text).
        replies: When ``generate_reply`` speeches were created.
        uninterrupted: When answers that were not interrupted were asked for.
    """
    finals = [(at, count) for at, count, final in transcripts if final]
    for at, text in commits:
        if not start < at < end:
            continue
        before = [f for f in finals if f[0] <= at + _SAME_STEP_S]
        if not before or abs(before[-1][0] - at) > _SAME_STEP_S:
            continue  # a turn's words are committed mid-turn at a final
        count = sum(n for _, n in before)
        if text.split() != list(heard[:count]):
            continue
        if not any(abs(r - at) <= _SAME_STEP_S for r in replies):
            continue
        if not any(abs(u - at) <= _SAME_STEP_S for u in uninterrupted):
            continue
        windows = _windows(start, at, transcripts, len(before))
        if windows is None:
            return None
        return TurnCut(round(at, 3), count, windows)
    return None


def word_count_by(
    at: float,
    finals: Sequence[tuple[float, int]],
    resets: Sequence[float],
) -> int:
    """The words livekit's turn limit counted by ``at``: the finals' since its last reset.

    Args:
        at: Seconds.
        finals: Every final transcript of the call: (seconds, how many words).
        resets: When livekit started its count over (the agent began to speak, a turn was
            committed).
    """
    since = max((r for r in resets if r < at - _SAME_STEP_S), default=-1.0)
    return sum(n for t, n in finals if since < t <= at + _SAME_STEP_S)


def _windows(
    start: float, cut: float, transcripts: Sequence[tuple[float, int, bool]], finals: int
) -> tuple[tuple[float, float, int], ...] | None:
    """Where the words of the turn's first ``finals`` finals were said, by their interims.

    An STT sends an interim transcript as each word is half said: the first and the full one
    of a final's words bound them, half a word further out. None when a final's interims do not
    say so (no interims, or one word).
    """
    windows: list[tuple[float, float, int]] = []
    run: list[tuple[float, int]] = []
    for at, count, final in transcripts:
        run.append((at, count))
        if not final:
            continue
        words = count
        full = next((t for t, c in run if c >= words), at)
        first = run[0][0]
        run = []
        if words < 2 or full <= first:
            return None
        half = (full - first) / (words - 1) / 2
        floor = windows[-1][1] if windows else start
        windows.append((round(max(floor, first - half), 3), round(min(cut, full + half), 3), words))
        if len(windows) == finals:
            return tuple(windows)
    return None
