"""Catalog scenarios the race fuzzer found: its shrunk calls, given ordinary words.

Each one is a window ``resilient-agent lab --fuzz`` broke a contract in on ``ResilientAgent``
(the seed and index are in its description). The words are ordinary English: the real-speech
lab builds its phrases from every catalog scenario, and PocketSphinx's dictionary must know them.
"""

from __future__ import annotations

from ...testing import LLMRule, Scenario, Sweep, ToolCallScript, Utterance, VADFault
from . import agents

__all__ = ["fuzz_found_controls", "fuzz_found_scenarios"]

# The lab's clock (see the catalog): the VAD ends speech 0.55 s after the caller stops, a
# protected hold message is heard whole before the caller's words can be answered, TTS speaks
# 15 characters a second, and an answer takes 1.5 times the 1.2 s no-race latency.
_HOLD_MESSAGE_S = len(agents.HOLD_MESSAGE) / 15
_AFTER_HELD_MESSAGE_BOUND = 0.55 + _HOLD_MESSAGE_S + 1.5 * 1.2

# A dead VAD is recovered on the watchdog's evidence (see the catalog), and the protected filler
# is heard whole before the answer.
_VAD_FAULT_BOUND = 2.0 + 1.5 * 1.2
_FILLER_S = len(agents.FILLER) / 15
# the VAD ends speech 0.55 s after the caller stops and livekit commits the turn 0.5 s later
_TURN_S = 0.55 + 0.5

_PREAMBLE = "Let me check the reservation book for you right now."


def fuzz_found_scenarios() -> list[Scenario]:
    """The races the fuzzer found, in the catalog's display order."""
    return [
        _preamble_interrupted_before_hold_message(),
        _dead_vad_caller_speaks_in_recovery(),
        _stuck_vad_over_hold_message(),
        _said_over_filler_with_reply_queued(),
    ]


def fuzz_found_controls() -> list[Scenario]:
    """Race-free calls the fuzzer found a false alarm in: they must pass on every agent."""
    return [_question_as_a_long_tool_ends()]


def _preamble_interrupted_before_hold_message() -> Scenario:
    # shrunk from fuzz/2026-97: booking_agent('protected_say', work_seconds=1.8),
    # (1.0-2.5 'please book a table for eight'), (4.0-6.0 'river falcon pepper violin')
    return Scenario(
        name="tool_gap/preamble_interrupted_before_hold_message",
        family="tool_gap",
        description=(
            "The caller talks over the LLM's interruptible preamble while its tool waits for "
            "its own protected hold message, queued behind that preamble, then works 3 s: the "
            "interrupted preamble waits for the tool past livekit's 5 s (found by the fuzzer)."
        ),
        agent=agents.booking_agent("protected_say", work_seconds=3.0),
        utterances=(
            # answered by the tool's result, once the hold message and the 3 s of work are over
            Utterance(1.0, 2.8, "please book a table for eight", reply_within=14.0),
            # heard after the hold message, which the app asked to be heard whole
            Utterance(
                5.0, 6.5, "could we sit by the window", reply_within=_AFTER_HELD_MESSAGE_BOUND
            ),
        ),
        llm=(
            LLMRule(
                text=_PREAMBLE,
                when_user_says="book",
                tool_calls=(ToolCallScript("book_table", {"time": "eight"}),),
            ),
            LLMRule(text="Your table is booked.", after_tool="book_table"),
        ),
        duration=24.0,
        # the preamble plays from about 4.5 s to 8.0 s
        sweep=Sweep(utterance=1, start=4.6, stop=6.6, step=0.25),
    )


def _dead_vad_caller_speaks_in_recovery() -> Scenario:
    # shrunk from fuzz/2026-176 (the Watchdog took the caller's new turn for the dead one and
    # switched the audio input off and on over it): filler_agent, a dead VAD 0.3 s into
    # (1.0-2.5 'what is on the menu'), (3.0-4.6 'jacket river ladder'), (6.36-7.0 'quartz')
    return Scenario(
        name="vad/dead_caller_speaks_during_recovery",
        family="vad",
        description=(
            "The VAD dies in the caller's first turn; the watchdog restarts it, and the caller "
            "speaks again, over the protected filler, before the watchdog checked its restart."
        ),
        agent=agents.filler_agent,
        utterances=(
            Utterance(1.0, 2.5, "what is on the menu"),
            Utterance(3.0, 4.6, "and do you have desserts"),
            Utterance(6.36, 7.0, "thanks"),
        ),
        vad_fault=VADFault(mode="dead", utterance=0, after=0.3),
        reply_bound=_VAD_FAULT_BOUND + _FILLER_S,
        # the watchdog restarts the VAD at 5.46 s and looks again 1 s later
        sweep=Sweep(utterance=2, start=5.7, stop=6.4, step=0.1),
    )


def _stuck_vad_over_hold_message() -> Scenario:
    # shrunk from fuzz/8080-262 (the recovered window, 'quartz walnut cactus violin' then the two
    # sentences livekit's STT heard, was matched against livekit's turn of those two sentences,
    # and the four withheld words were taken for a misheard copy and dropped):
    # booking_agent('protected_say', work_seconds=2.5), a VAD stuck 0.3 s into
    # (4.0-5.85 'quartz walnut cactus violin'), then (6.37-8.83) and (9.58-11.75), five words each;
    # more words in the later sentences than the withheld one's mismatches keep the bug hidden
    return Scenario(
        name="vad/stuck_over_hold_message",
        family="vad",
        description=(
            "The caller talks over a tool's protected hold message, which livekit withholds from "
            "the STT, and the VAD sticks in that turn; the caller says two more sentences before "
            "the watchdog restarts it (found by the fuzzer)."
        ),
        agent=agents.booking_agent("protected_say", work_seconds=2.5),
        utterances=(
            Utterance(1.0, 2.5, "please book a table for eight", reply_within=22.0),
            Utterance(4.0, 5.85, "we need a high chair", reply_within=19.0),
            Utterance(6.37, 8.83, "my mother will join us", reply_within=16.0),
            Utterance(9.58, 11.75, "she likes a quiet corner", reply_within=13.0),
        ),
        llm=(
            LLMRule(
                when_user_says="book",
                tool_calls=(ToolCallScript("book_table", {"time": "eight"}),),
            ),
            LLMRule(text="Your table is booked.", after_tool="book_table"),
        ),
        vad_fault=VADFault(mode="stuck", utterance=1, after=0.3),
        reply_bound=13.0,
        duration=31.0,
    )


def _said_over_filler_with_reply_queued() -> Scenario:
    # shrunk from fuzz/8080-1611 (livekit skipped the caller's turn for the protected filler, and
    # the reply queued behind the filler, made without the caller's words, played whole before
    # they were answered): filler_agent, a VAD without end of speech in (1.0-2.0 'what is on
    # the menu'), then ten more words to 7.5 s, (8.2-9.0 'igloo') -> answered after 9.48 s
    return Scenario(
        name="lost_words/said_over_filler_with_reply_queued",
        family="lost_words",
        description=(
            "The caller asks a long question; while the protected filler plays, with the reply "
            "to the question queued behind it, they ask something else (found by the fuzzer)."
        ),
        agent=agents.filler_agent,
        utterances=(
            Utterance(
                1.0,
                4.0,
                "what is on the menu tonight and do you have anything without nuts",
                # answered with the second question, which has this one in its context
                reply_within=_TURN_S + _FILLER_S + 1.5 * 1.2,
            ),
            # said over the filler (about 4.7 s to 7.2 s), ended before it: answered once it is
            # over, at worst the whole filler then an answer
            Utterance(5.2, 6.0, "is there a kids menu", reply_within=_FILLER_S + 1.5 * 1.2),
        ),
        duration=18.0,
    )


def _question_as_a_long_tool_ends() -> Scenario:
    # shrunk from fuzz/7-269 (the Watchdog took the 7.6 s of work after the hold message for a
    # reply that stalled, and asked for the tool's reply twice): booking_agent('disallow_and_say',
    # work_seconds=7.6), (1.0-2.2 'please book a table for eight'),
    # (15.0-16.9 'orange candle cactus marble')
    return Scenario(
        name="control/question_as_a_long_tool_ends",
        family="control",
        description=(
            "A protected tool says its hold message, then works 7.6 s with nothing to say (the "
            "agent shows as thinking); the caller asks something as it ends."
        ),
        agent=agents.booking_agent("disallow_and_say", work_seconds=7.6),
        utterances=(
            Utterance(1.0, 2.2, "please book a table for eight", reply_within=18.0),
            Utterance(15.0, 16.9, "what time do you close tonight", reply_within=4.0),
        ),
        llm=(
            LLMRule(
                text=_PREAMBLE,
                when_user_says="book",
                tool_calls=(ToolCallScript("book_table", {"time": "eight"}),),
            ),
            LLMRule(text="Your table is booked.", after_tool="book_table"),
        ),
        duration=30.0,
        control=True,
    )
