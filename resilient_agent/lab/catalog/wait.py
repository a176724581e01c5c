"""The catalog's callers who keep talking over a protected speech past WaitForCaller's ``wait_s``.

A protected speech (a hold message, a filler, a transfer's message) that would start over a
speaking caller waits for them; a caller who goes on talking past ``wait_s`` (3 s), with pauses
shorter than the VAD's end of speech, used to hear it start over them at the bound (the fuzzer
counted about 1.6% of its calls so). The caller is still saying words: the wait goes on until
they stop, up to ``max_wait_s``.
"""

from __future__ import annotations

from ...testing import LLMRule, Scenario, ToolCallScript, Utterance
from . import agents

__all__ = ["long_talker_scenarios"]

# The lab's clock (see the catalog): the VAD ends speech 0.55 s after the caller stops, TTS
# speaks 15 characters a second, and an answer takes 1.5 times the 1.2 s no-race latency. A
# held speech is heard whole, as the app asked, before the caller's words are answered.
_VAD_END_S = 0.55
_ANSWER_S = 1.5 * 1.2
_AFTER_HOLD_MESSAGE = _VAD_END_S + len(agents.HOLD_MESSAGE) / 15 + _ANSWER_S
_AFTER_FILLER = _VAD_END_S + len(agents.FILLER) / 15 + _ANSWER_S

_BOOK = LLMRule(
    when_user_says="book",
    tool_calls=(ToolCallScript("book_table", {"time": "eight"}),),
    ttft=0.3,
    duration=0.5,
)
_BOOKED = LLMRule(text="Your table is booked.", after_tool="book_table")
_TRANSFER = LLMRule(when_user_says="manager", tool_calls=(ToolCallScript("transfer_to_manager"),))


def _one_long_turn(bound: float, *said: tuple[float, float, str]) -> tuple[Utterance, ...]:
    """Utterances answered together, the last one within ``bound`` (the caller's one turn)."""
    last_end = said[-1][1]
    return tuple(
        Utterance(start, end, text, reply_within=last_end - end + bound)
        for start, end, text in said
    )


def long_talker_scenarios() -> list[Scenario]:
    """A caller talking 5 to 6 s, nearly without a pause, over a held protected speech."""
    return [_over_hold_message(), _over_filler(), _over_transfer_message()]


def _over_hold_message() -> Scenario:
    return Scenario(
        name="talk_over/caller_keeps_talking_over_hold_message",
        family="talk_over",
        description=(
            "The caller corrects their booking in three sentences, 3.7 s to 9.2 s with pauses "
            "shorter than the VAD's silence, while the tool's protected hold message waits "
            "for them: past the 3 s bound they are still saying words."
        ),
        agent=agents.booking_agent("protected_say", work_seconds=2.0),
        # the booking is answered with the rest, once the hold message was heard
        utterances=_one_long_turn(
            _AFTER_HOLD_MESSAGE,
            (1.0, 2.8, "please book a table for eight"),
            (3.7, 5.4, "actually make it nine instead"),
            (5.45, 7.3, "and we would like a quiet corner"),
            (7.35, 9.2, "near the window if you can"),
        ),
        llm=(_BOOK, _BOOKED),
        duration=26.0,
    )


def _over_filler() -> Scenario:
    # found by the fuzzer, fuzz/2026-43: filler_agent, (1.0-2.81 'what is on the menu'), then
    # (3.43-4.6), (4.65-6.38), (6.43-7.75): the filler, held from 3.51 s, played from 6.51 s,
    # 1.24 s over the caller
    return Scenario(
        name="talk_over/caller_keeps_talking_over_filler",
        family="talk_over",
        description=(
            "The caller asks for the menu, then goes on talking from 3.4 s to 7.75 s with "
            "pauses of 0.05 s while the protected filler waits for them (found by the fuzzer)."
        ),
        agent=agents.filler_agent,
        utterances=_one_long_turn(
            _AFTER_FILLER,
            (1.0, 2.81, "what is on the menu"),
            (3.43, 4.6, "do you have soup"),
            (4.65, 6.38, "and something for my son"),
            (6.43, 7.75, "and a glass of water"),
        ),
        duration=20.0,
    )


def _over_transfer_message() -> Scenario:
    # the fuzzer's most frequent shape (18 of the 32 calls of seed 2026): the caller keeps
    # talking over a transfer's protected message while the tool hands the call over, so the
    # hold goes on after the front desk's middleware closed
    return Scenario(
        name="talk_over/caller_keeps_talking_through_handoff_hold",
        family="talk_over",
        description=(
            "The caller keeps talking, 3.4 s to 8.8 s with short pauses, over a transfer's "
            "protected message while the tool hands the call to the manager."
        ),
        agent=agents.protected_handoff_agent(delay_s=1.0),
        utterances=(
            Utterance(1.0, 2.15, "let me talk to the manager", expect_reply=False),
            Utterance(3.4, 5.4, "my order never came", reply_within=14.0),
            Utterance(5.45, 7.2, "and nobody answered the phone", reply_within=12.0),
            Utterance(7.25, 8.8, "I waited for an hour", reply_within=11.0),
        ),
        llm=(_TRANSFER,),
        duration=26.0,
    )
