"""A recovered window whose middle was delivered already, merged in front of livekit's turn.

The keeper re-transcribes a window livekit withheld from the STT; words of it the live stream
heard and the LLM already took (a tool reply's inference) are cut out of the recovered text. When
livekit then commits a turn that holds those delivered words again, the recovered words on either
side of the cut must not be taken for a mishearing of them.
"""

from __future__ import annotations

from resilient_agent.middleware.turn_keeper.merging import merge_into
from resilient_agent.middleware.turn_keeper.options import TurnKeeperOptions

from resilient_agent._engine.pending_words import Fragment, PendingWords


def _merged(recovered: str, delivered_within: str, turn: str) -> str:
    words = PendingWords()
    words.add(Fragment(recovered, 1.0, recovered=True, delivered_within=delivered_within))
    return merge_into(words, turn, TurnKeeperOptions())


def test_a_word_before_the_delivered_ones_is_not_taken_for_a_mishearing_of_them() -> None:
    # "marble pencil button ticket planet copper" recovered; "pencil" delivered before
    merged = _merged(
        "marble button ticket planet copper", "pencil", "pencil button ticket planet copper"
    )
    assert merged == "marble pencil button ticket planet copper"


def test_words_before_two_delivered_words_are_kept() -> None:
    merged = _merged(
        "ticket dragon garden castle candle planet",
        "silver marble",
        "silver marble castle candle planet",
    )
    assert merged == "ticket dragon garden silver marble castle candle planet"


def test_without_delivered_words_the_turn_still_removes_its_own_words() -> None:
    merged = _merged("marble pencil button", "", "pencil button")
    assert merged == "marble pencil button"
