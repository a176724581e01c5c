"""The caller's pending words merged in front of a turn: delivered, never twice."""

from __future__ import annotations

from resilient_agent._engine.pending_words import Fragment, PendingWords, normalized

from .options import TurnKeeperOptions
from .transcript_match import remove_heard, without_repeats

__all__ = ["merge_into"]


def merge_into(words: PendingWords, text: str, options: TurnKeeperOptions) -> str:
    """``text`` with every pending fragment merged in front of it; they are delivered.

    The words and the turn become one message by the keeper's ``merge_format``.

    Args:
        words: The session's pending words.
        text: The turn the words join (empty when no turn came).
        options: The keeper's options.

    Returns:
        ``text`` unchanged when nothing was pending.
    """
    pending = words.undelivered()
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
        fragments = remove_heard(fragments, _less_delivered(turn, pending))
    return options.merged_text(fragments, turn)


def _less_delivered(turn: str, pending: list[Fragment]) -> str:
    """``turn`` less the words recovered fragments had cut out, as delivered already.

    Those words are not in the fragments: left in the turn, they would pair with the recovered
    words next to the cut, and take them away as a mishearing.
    """
    for fragment in pending:
        if fragment.delivered_within:
            turn = remove_heard(turn, fragment.delivered_within)
    return turn
