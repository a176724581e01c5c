"""The caller's words the TurnKeeper holds until they reach the LLM: bounded, never lost silently.

Each final transcript (or recovered window) is a :class:`~.handover.Fragment`. A fragment leaves
the pending words when it is delivered (merged into a turn or an inference, or seen in a user
message of the history) or superseded (replaced by a recovery of its window). The store is
bounded: a fragment dropped before it was delivered (too many held, ``max_fragments`` pending,
older than ``max_age_s``) is logged with the reason.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from resilient_agent import get_logger

from .handover import Fragment
from .transcript_match import normalized, remove_heard, without_repeats

if TYPE_CHECKING:
    from .turn_keeper import TurnKeeper

__all__ = ["PendingWords"]

# the TurnKeeper's records: one logger for everything the keeper does
logger = get_logger("middleware.turn_keeper")

# How many fragments (delivered or not) are held per pending one allowed.
_HELD_PER_PENDING = 4


class PendingWords:
    """The fragments heard, in the order they were said, until each is delivered or dropped.

    Args:
        keeper: The TurnKeeper whose ``max_fragments`` and ``max_age_s`` bound the store (read at
            each use: an app may change them on the live instance).
    """

    def __init__(self, keeper: TurnKeeper) -> None:
        self._keeper = keeper
        self._fragments: deque[Fragment] = deque()

    def __iter__(self) -> Iterator[Fragment]:
        """Every fragment held, delivered or not, oldest first."""
        return iter(self._fragments)

    def __len__(self) -> int:
        return len(self._fragments)

    def add_earlier(self, fragments: list[Fragment]) -> None:
        """Keep ``fragments``, said before the words pending now (in their order)."""
        for fragment in reversed(fragments):
            self._fragments.appendleft(fragment)
        self._bound()

    def _bound(self) -> None:
        """Drop (and log) the oldest fragments beyond the bounds."""
        max_fragments = self._keeper.max_fragments
        while len(self._fragments) > max_fragments * _HELD_PER_PENDING:
            old = self._fragments.popleft()
            if not old.delivered and not old.superseded:
                _log_dropped(old, "too many pending")
        pending = self.undelivered()
        for extra in pending[: max(0, len(pending) - max_fragments)]:
            extra.superseded = True
            _log_dropped(extra, "max_fragments reached")

    def add(self, fragment: Fragment) -> None:
        """Keep ``fragment``; drop (and log) the oldest beyond the bounds."""
        self._fragments.append(fragment)
        self._bound()

    def expire(self, now: float) -> None:
        """Drop (and log) the undelivered fragments older than ``max_age_s`` at ``now``."""
        cutoff = now - self._keeper.max_age_s
        for fragment in self.undelivered():
            if fragment.heard_at < cutoff:
                fragment.superseded = True
                _log_dropped(fragment, "older than max_age_s")

    def undelivered(self) -> list[Fragment]:
        """The fragments still to reach the LLM, oldest first."""
        return [f for f in self._fragments if not f.delivered and not f.superseded]

    def any_undelivered(self) -> bool:
        """Whether any fragment is still to reach the LLM."""
        for fragment in self._fragments:
            if not fragment.delivered and not fragment.superseded:
                return True
        return False

    def word_count(self) -> int:
        """Words heard but not yet delivered."""
        return sum(len(f.text.split()) for f in self.undelivered())

    def deliver_said(self, said: str) -> None:
        """Mark delivered the pending fragments that ``said`` (normalized) contains."""
        for fragment in self.undelivered():
            if normalized(fragment.text) in said:
                fragment.delivered = True

    def merge_into(self, text: str) -> str:
        """``text`` with every pending fragment merged in front of it; they are delivered.

        The words and the turn become one message by the keeper's ``merge_format``.

        Args:
            text: The turn the words join (empty when no turn came).

        Returns:
            ``text`` unchanged when nothing was pending.
        """
        pending = self.undelivered()
        for fragment in pending:
            fragment.delivered = True
        fragments = " ".join(without_repeats(pending))
        if not fragments:
            return text
        turn = text.strip()
        if normalized(turn) in normalized(fragments):
            turn = ""  # the turn says nothing the fragments do not: never the same words twice
        elif turn:
            # a real recognizer may hear the live turn a little differently from the recovered
            # window: the fragments keep only what the turn does not already say
            fragments = remove_heard(fragments, turn)
        return self._keeper.merge_format.format(fragments=fragments, turn=turn).strip()


def _log_dropped(fragment: Fragment, why: str) -> None:
    # the count of words, never the words: records carry no transcripts
    logger.warning("user_words_dropped", words=len(fragment.text.split()), why=why)
