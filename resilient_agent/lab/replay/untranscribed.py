"""Where a caller's untranscribed words were said, from what a report evidences of them.

The report has the VAD's turns and the STT's transcripts; the words between them are estimated
(placeholders, see :class:`~.plan.CallerTurn`). These rules say where such words were, or were
not, from the other events: when livekit began withholding the caller's audio, which turn a
transcript that came late belongs to, and a stretch of sound that never carried words.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["late_final_turn", "split", "split_noise", "withheld_from", "words_after"]


def withheld_from(
    start: float, stopped: float, began_speaking: Sequence[float], created: Sequence[float]
) -> float:
    """When livekit began withholding the audio of a turn the agent then spoke over.

    livekit feeds the STT silence from the moment an uninterruptible speech becomes current,
    which is as it is created (``speech_created``), before its first audio plays. The STT had
    the turn's audio until then and sent no transcript of it: no word of the turn was said by
    then, and the untranscribed words were said from then on.

    Args:
        start: The turn's start.
        stopped: When the agent stopped speaking over it.
        began_speaking: When the agent began speaking, each time (``agent_state_changed``).
        created: When each speech was created (``speech_created``).
    """
    began = next((t for t in began_speaking if start <= t < stopped), None)
    if began is None:
        return start  # the agent spoke already as the turn began
    before = [t for t in created if start <= t <= began]
    return before[-1] if before else began


# a turn that begins this soon after the one before ended goes on from it (a commit split the
# caller's speech): within a frame, as a replay starts a turn just after the one before
_SPLIT_S = 0.011


def split(end: float, start: float) -> bool:
    """Whether a turn starting at ``start`` goes on from one that ended at ``end`` (a split).

    A start livekit backdated further into the turn before is speech the VAD heard again.
    """
    return -1e-3 <= start - end <= _SPLIT_S


def late_final_turn(
    at: float,
    words: Sequence[str],
    turns: Sequence[tuple[float, float | None]],
    interims: Sequence[tuple[float, str]],
    stt_died_at: float | None,
) -> int | None:
    """The earlier turn a final transcript at ``at`` belongs to, if not the latest one.

    A final comes after the words it transcribes. Two cases put it in a turn before the latest:

    - the STT died for good before it (an unrecoverable ``stt_error``): it is the words the
      STT had before it died, flushed later; they belong to the turn open when it died;
    - the latest turn began as the one before ended (a commit split the caller's speech) and
      has no transcript of its own yet, while an interim of the turn before already had these
      words: the final of that turn's words came after the split.

    Args:
        at: When the final came.
        words: Its words.
        turns: Each turn so far: its start and end (None while open), in order.
        interims: Each interim transcript so far: when, and its text.
        stt_died_at: When the STT failed for good, if it did.

    Returns:
        The index of the turn it belongs to; None for the latest turn.
    """
    if len(turns) < 2:
        return None
    if stt_died_at is not None and at > stt_died_at:
        open_then = [i for i, (s, _) in enumerate(turns) if s <= stt_died_at]
        if open_then and open_then[-1] < len(turns) - 1:
            return open_then[-1]
        return None
    (before_start, before_end), (start, _) = turns[-2], turns[-1]
    if before_end is None or not split(before_end, start):
        return None
    own = [text for t, text in interims if t >= start]
    if own:
        return None
    theirs = [text for t, text in interims if before_start <= t < start]
    if theirs and theirs[-1].split() == list(words):
        return len(turns) - 2
    return None


def words_after(start: float, end: float, heard: int, died_at: float) -> int:
    """How many words a turn had after the STT died in it, at the pace of those it heard.

    The words the STT flushed after it died were said from the turn's start to its death;
    the rest of the turn, to its end, went to a dead stream.
    """
    if not start < died_at < end or heard < 1:
        return 0
    pace = (died_at - start) / heard
    return round((end - died_at) / pace)


def split_noise(
    turn: tuple[float, float | None],
    after: tuple[float, bool] | None,
    speaking: Sequence[tuple[float, float]],
) -> bool:
    """Whether an untranscribed turn starts one long sound a commit split (noise, no words).

    The turn after it goes on from it with no pause and has no transcript either, and the agent
    did not speak over it, so livekit withheld none of its audio: the STT had all of one long
    sound and heard no word in it.

    Args:
        turn: The turn's start and end (None while open).
        after: The next turn's start and whether it has words, if there is one.
        speaking: When the agent spoke: (began, stopped) each time.
    """
    start, end = turn
    if end is None or after is None or after[1] or after[0] > end + 1e-3:
        return False
    return not any(a < end and start < b for a, b in speaking)
