"""How a recovered window's transcript is compared with what the live stream already delivered."""

from __future__ import annotations

from resilient_agent.middleware.turn_keeper.transcript_match import remove_heard


def test_words_of_another_sentence_next_to_the_heard_ones_stay() -> None:
    # fuzz/8080-262: the recovered window holds a withheld sentence, then the two livekit heard
    recovered = "we need a high chair she likes a quiet corner"
    heard = "my mother will join us she likes a quiet corner"
    assert remove_heard(recovered, heard) == "we need a high chair"


def test_words_between_two_heard_far_apart_stay() -> None:
    # fuzz/2026-240: the live stream heard only the first and the last word of a long window
    recovered = "orange glacier koala purple window apple mirror dolphin"
    assert remove_heard(recovered, "orange dolphin") == (
        "glacier koala purple window apple mirror dolphin"
    )


def test_a_word_or_two_garbled_where_the_live_stream_cut_in_go_with_the_heard_ones() -> None:
    # real speech (tool_gap/business_logic_long): the live stream cut in mid-sentence
    assert remove_heard("actually make it nine instead", "we it nine instead") == "actually"
    assert remove_heard("actually make it nine instead", "like you nine instead") == "actually"


def test_a_misheard_word_between_heard_ones_goes_with_them() -> None:
    assert remove_heard("so a table for nine then", "table four nine") == "so a then"


def test_exactly_heard_words_go_and_something_else_stays() -> None:
    assert remove_heard("I want to change my booking please", "my booking please") == (
        "I want to change"
    )
    assert remove_heard("table for nine please", "table for nine peas") == "please"
    assert remove_heard("hello there", "something else entirely") == "hello there"
    assert remove_heard("hello there", "") == "hello there"
