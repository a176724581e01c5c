"""Comparing transcripts of the same speech: a re-transcribed window and the live stream's."""

from __future__ import annotations

from resilient_agent._engine.pending_words import Fragment, normalized

__all__ = ["SAME_SPEECH_S", "remove_heard", "without_repeats"]

SAME_SPEECH_S = 1.0
"""A recovered window and the live final of the same speech arrive within this of each other."""
# Words a live stream garbles where it cuts into or out of a sentence.
_MISHEARD_AT_EDGE = 2


def without_repeats(fragments: list[Fragment]) -> list[str]:
    """The fragments' texts, less one that repeats the one just before it.

    A window re-transcribed after protected speech and the live final of the same speech can
    arrive together; a real recognizer may word them a little differently, so a fragment heard
    within ``SAME_SPEECH_S`` of the previous one that matches a stretch of it is a repeat.
    """
    texts: list[str] = []
    previous: Fragment | None = None
    for fragment in fragments:
        if (
            previous is not None
            and fragment.heard_at - previous.heard_at <= SAME_SPEECH_S
            and remove_heard(previous.text, fragment.text) != previous.text
        ):
            continue
        texts.append(fragment.text)
        previous = fragment
    return texts


def remove_heard(text: str, delivered: str) -> str:
    """``text`` without the stretch of words that best matches ``delivered``.

    A real recognizer may transcribe the re-transcribed window a little differently from the
    live stream, so the stretch is found by edit distance (a word misheard here or there), and
    removed only when at most half of the delivered words differ; otherwise ``text`` is kept.
    A live stream that starts or stops hearing mid-sentence garbles a word or two where it cuts
    in or out, never a sentence: at each end of the stretch, at most ``_MISHEARD_AT_EDGE``
    differing words (and no more than the words heard exactly) go with it; a longer differing
    run is words of ``text`` the live stream never delivered (a withheld sentence next to the
    heard ones), and is kept. A word kept twice costs the LLM a repeat; a word dropped is lost.
    """
    words = text.split()
    said = [normalized(w) for w in words]
    gone = normalized(delivered).split()
    if not gone:
        return text
    distance, (first, last), matched = _best_stretch(said, gone)
    if distance * 2 > len(gone) or not matched:
        return text
    edge = min(_MISHEARD_AT_EDGE, len(matched))
    start, end = matched[0], matched[-1] + 1
    if start - first <= edge:
        start = first
    if last - end <= edge:
        end = last
    return " ".join(words[:start] + words[end:])


def _best_stretch(said: list[str], gone: list[str]) -> tuple[int, tuple[int, int], list[int]]:
    """Semi-global alignment of all of ``gone`` against a stretch of ``said``.

    Returns:
        The edit distance, the stretch (``said[first:last]``), and the indices of the words of
        ``said`` the alignment matched exactly, in order.
    """
    # cost[row][column]: ``gone[:row]`` against a stretch of ``said`` ending at ``column``
    cost = [[0] * (len(said) + 1)]
    for row, heard in enumerate(gone, start=1):
        above = cost[-1]
        current = [row]
        for column, word in enumerate(said, start=1):
            current.append(
                min(above[column - 1] + (word != heard), above[column] + 1, current[-1] + 1)
            )
        cost.append(current)
    distance, last = min((c, column) for column, c in enumerate(cost[-1]))
    column = last
    matched: list[int] = []
    row = len(gone)
    while row > 0 and column > 0:
        diagonal = cost[row - 1][column - 1] + (said[column - 1] != gone[row - 1])
        if cost[row][column] == diagonal:
            if said[column - 1] == gone[row - 1]:
                matched.append(column - 1)
            row, column = row - 1, column - 1
        elif cost[row][column] == cost[row - 1][column] + 1:
            row -= 1
        else:
            column -= 1
    matched.reverse()
    return distance, (column, last), matched
