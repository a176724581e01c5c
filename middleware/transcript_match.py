"""Comparing transcripts of the same speech: a re-transcribed window and the live stream's."""

from __future__ import annotations

import re

from .handover import Fragment

__all__ = ["SAME_SPEECH_S", "normalized", "remove_heard", "without_repeats"]

SAME_SPEECH_S = 1.0
"""A recovered window and the live final of the same speech arrive within this of each other."""
_WORD = re.compile(r"[\w']+")


def normalized(text: str) -> str:
    """Lower-case words only: how two transcripts of the same words compare."""
    return " ".join(w.lower() for w in _WORD.findall(text))


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
    """
    words = text.split()
    said = [normalized(w) for w in words]
    gone = normalized(delivered).split()
    if not gone:
        return text
    # semi-global alignment: all of ``gone`` against any stretch of ``words``
    previous = [(0, start) for start in range(len(words) + 1)]
    for row, heard in enumerate(gone, start=1):
        current = [(row, 0)]
        for column, word in enumerate(said, start=1):
            options = (
                (previous[column - 1][0] + (word != heard), previous[column - 1][1]),
                (previous[column][0] + 1, previous[column][1]),
                (current[column - 1][0] + 1, current[column - 1][1]),
            )
            current.append(min(options))
        previous = current
    distance, end = min((cost, column) for column, (cost, _) in enumerate(previous))
    if distance * 2 > len(gone):
        return text
    start = previous[end][1]
    return " ".join(words[:start] + words[end:])
