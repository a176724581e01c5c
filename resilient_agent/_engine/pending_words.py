"""The caller's words not yet delivered to the LLM: one model per session, in the state.

Each final transcript is a :class:`Fragment` in ``ctx.state.pending_words`` from the moment
livekit reports it (the session's runtime adds it, in livekit's event order). A fragment leaves
the pending words when it is delivered: seen in a user message of the history (the runtime), or
taken into a turn or an inference by a middleware that merges words (the TurnKeeper), or
superseded (replaced by a recovery of its window, or dropped beyond the bounds, logged). Every
reader (``ConditionalHangup`` keeps the call while words are pending) sees the same words.

The store is bounded (``max_fragments`` pending, ``max_age_s`` old, set by the middleware that
answers the words with :meth:`PendingWords.limit`); a fragment dropped before it was delivered
is logged with the reason, never silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from .log import get_logger

__all__ = ["TYPED_EXTRA", "Fragment", "InputModality", "PendingWords", "normalized", "typed_extra"]

logger = get_logger("pending_words")

InputModality = Literal["audio", "text"]

TYPED_EXTRA = "resilient_agent_typed"
"""The key of a user message's ``extra`` that says which of its words were typed.

A middleware that merges a typed message with the caller's spoken words into one user message
sets it to the typed texts, in order (see :func:`typed_extra`): livekit's session report keeps
the message's ``extra`` (the LLM never sees it), and a replay of the report types exactly those
words and has the caller say the rest.
"""

# How many fragments (delivered or not) are held per pending one allowed.
_HELD_PER_PENDING = 4
_WORD = re.compile(r"[\w']+")


def normalized(text: str) -> str:
    """Lower-case words only: how two transcripts of the same words compare."""
    return " ".join(w.lower() for w in _WORD.findall(text))


@dataclass
class Fragment:
    """Words the caller said, kept until they reach the LLM.

    ``delivered`` and ``superseded`` only ever turn true, but through
    :meth:`PendingWords.give_back` (the store skips the fragments it once found done).

    Attributes:
        text: The words.
        heard_at: Loop time when they were final (recovered: when their window closed).
        delivered: They reached the LLM.
        superseded: Replaced by a recovery, or dropped (and logged).
        recovered: Recovered from the audio of one whole speech window, never a partial
            transcript of another.
        modality: How they came in: spoken (``"audio"``) or typed (``"text"``); the library
            answers them with the same modality, so modality-aware tasks (livekit's
            ``GetEmailTask`` reads back and confirms spoken input) behave as for live input.
        over_agent_speech: Said while an interruptible agent speech played: under livekit's
            ``min_words`` it is a backchannel livekit keeps for the caller's next turn.
        delivered_within: Recovered: the words of its window the LLM had already taken, cut
            out of ``text``. A turn livekit commits later may hold them again; they are matched
            there first, so the recovered words on either side of the cut are not taken for a
            mishearing of them.
    """

    text: str
    heard_at: float
    delivered: bool = False
    superseded: bool = False
    recovered: bool = False
    modality: InputModality = "audio"
    over_agent_speech: bool = False
    delivered_within: str = ""


class PendingWords:
    """The fragments heard, in the order they were said, until each is delivered or dropped.

    Args:
        max_fragments: How many undelivered fragments are kept; older ones are logged and
            dropped.
        max_age_s: Undelivered fragments older than this are dropped by :meth:`expire`.
    """

    def __init__(self, *, max_fragments: int = 8, max_age_s: float = 60.0) -> None:
        self.max_fragments = max_fragments
        self.max_age_s = max_age_s
        self._fragments: list[Fragment] = []
        # how many of the oldest fragments are done (delivered or superseded): a fragment's
        # flags only turn true (but through give_back), so those are never read again. Most
        # fragments held are done (up to _HELD_PER_PENDING times as many as the pending ones)
        # and every reader asks for the pending ones only.
        self._done = 0

    def limit(self, *, max_fragments: int, max_age_s: float) -> None:
        """Bound the store as the middleware answering the words is configured."""
        self.max_fragments = max_fragments
        self.max_age_s = max_age_s
        self._bound()

    def __iter__(self) -> Iterator[Fragment]:
        """Every fragment held, delivered or not, oldest first."""
        return iter(self._fragments)

    def __len__(self) -> int:
        return len(self._fragments)

    def add(self, fragment: Fragment) -> None:
        """Keep ``fragment``; drop (and log) the oldest beyond the bounds."""
        self._fragments.append(fragment)
        self._bound()

    def add_earlier(self, fragments: list[Fragment]) -> None:
        """Keep ``fragments``, said before the words pending now (in their order)."""
        self._fragments[:0] = fragments
        self._done = 0
        self._bound()

    def give_back(self, fragments: Iterable[Fragment]) -> None:
        """Mark ``fragments`` undelivered again: the reply meant to carry them was not made."""
        for fragment in fragments:
            fragment.delivered = False
        self._done = 0

    def _bound(self) -> None:
        """Drop (and log) the oldest fragments beyond the bounds."""
        max_fragments = self.max_fragments
        while len(self._fragments) > max_fragments * _HELD_PER_PENDING:
            old = self._fragments.pop(0)
            if self._done:
                self._done -= 1
            if not old.delivered and not old.superseded:
                _log_dropped(old, "too many pending")
        pending = self.undelivered()
        for extra in pending[: max(0, len(pending) - max_fragments)]:
            extra.superseded = True
            _log_dropped(extra, "max_fragments reached")

    def expire(self, now: float) -> list[Fragment]:
        """Drop (and log) the undelivered fragments older than ``max_age_s`` at ``now``.

        Returns:
            The fragments still to reach the LLM (:meth:`undelivered` after the drop).
        """
        cutoff = now - self.max_age_s
        pending = self.undelivered()
        expired = False
        for fragment in pending:
            if fragment.heard_at < cutoff:
                fragment.superseded = expired = True
                _log_dropped(fragment, "older than max_age_s")
        return [f for f in pending if not f.superseded] if expired else pending

    def undelivered(self) -> list[Fragment]:
        """The fragments still to reach the LLM, oldest first."""
        return [
            f
            for f in self._fragments[self._first_pending() :]
            if not f.delivered and not f.superseded
        ]

    def any_undelivered(self) -> bool:
        """Whether any fragment is still to reach the LLM."""
        return self._first_pending() < len(self._fragments)

    def _first_pending(self) -> int:
        """Where the oldest fragment still to reach the LLM is (the count held when none).

        Remembered: the fragments before it stay done (their flags only turn true, except
        through :meth:`give_back`, which moves the mark back).
        """
        fragments, done = self._fragments, self._done
        held = len(fragments)
        while done < held and (fragments[done].delivered or fragments[done].superseded):
            done += 1
        self._done = done
        return done

    def word_count(self) -> int:
        """Words heard but not yet delivered."""
        return sum(len(f.text.split()) for f in self.undelivered())

    def deliver_said(self, said: str) -> None:
        """Mark delivered the pending fragments that ``said`` (a user message) contains."""
        said = normalized(said)
        for fragment in self.undelivered():
            if normalized(fragment.text) in said:
                fragment.delivered = True


def typed_extra(fragments: Iterable[Fragment], *, spoken_turn: bool = False) -> dict[str, Any]:
    """The ``extra`` of a user message merged from ``fragments``: its typed words, if mixed.

    Args:
        fragments: The fragments merged into the message, in order.
        spoken_turn: They join a turn livekit committed from the caller's speech.

    Returns:
        ``{TYPED_EXTRA: [typed texts]}`` when typed and spoken words share the message; empty
        when it is all typed or all spoken (its modality says which).
    """
    fragments = list(fragments)
    typed = [f.text for f in fragments if f.modality == "text"]
    spoken = spoken_turn or any(f.modality == "audio" for f in fragments)
    return {TYPED_EXTRA: typed} if typed and spoken else {}


def _log_dropped(fragment: Fragment, why: str) -> None:
    # the count of words, never the words: records carry no transcripts
    logger.warning("user_words_dropped", words=len(fragment.text.split()), why=why)
