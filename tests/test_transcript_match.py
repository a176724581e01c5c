"""How a recovered window's transcript is compared with what the live stream already delivered."""

from __future__ import annotations

from resilient_agent.middleware.transcript_match import remove_heard


def test_words_of_another_sentence_next_to_the_heard_ones_stay() -> None:
    # fuzz/8080-262: the recovered window holds a withheld sentence, then the two livekit heard
    recovered = "we need a high chair she likes a quiet corner"
    heard = "my mother will join us she likes a quiet corner"
    assert remove_heard(recovered, heard) == "we need a high chair"


def test_one_misheard_word_at_an_end_goes_with_the_heard_ones() -> None:
    assert remove_heard("actually make it nine instead", "we it nine instead") == "actually"
    assert remove_heard("table for nine please", "table for nine peas") == ""


def test_a_misheard_word_inside_goes_with_the_heard_ones() -> None:
    assert remove_heard("so a table for nine then", "table four nine") == "so a then"


def test_exactly_heard_words_go_and_something_else_stays() -> None:
    assert remove_heard("I want to change my booking please", "my booking please") == (
        "I want to change"
    )
    assert remove_heard("hello there", "something else entirely") == "hello there"
    assert remove_heard("hello there", "") == "hello there"
