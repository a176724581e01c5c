"""Three seeded random calls of another generator that failed on ResilientAgent, now passing.

Each is built only from the project's public API, as reported.

* ``first_word_at_protected_say`` (fixed): "marble pencil" (6.44 s) is said while the tool's
  protected hold message plays (4.00-6.89 s). The live STT hears "pencil", which the tool reply's
  inference takes (8.32 s); the keeper's withheld-audio recovery (9.80 s, from 6.19 s) hears
  "marble pencil button ticket planet copper" and cuts the delivered "pencil" out of it. livekit
  then commits the turn "pencil button ticket planet copper", and the merge took the recovered
  "marble", next to the cut, for a mishearing of the turn's "pencil" at the stretch's edge.
* ``two_words_around_protected_say`` (fixed): the same, with "dragon garden" next to the
  delivered "silver marble".

  Fixed in the merge: the turn is matched less the words cut out of a recovered fragment as
  delivered (``Fragment.delivered_within``), so nothing pairs with the words next to the cut.
* ``answer_heard_twice`` (fixed): "Your table is booked." played twice. The keeper answers the
  words said over the protected preamble and hold message (13.91 s) while the first reply's tool
  still runs; that answer plays from 14.56 s, and when the tool ends (15.20 s) livekit makes the
  tool reply and says "thinking" while the answer plays on. After 6 s of "thinking" the
  Watchdog took the playing answer for a stalled one: it cut it (the caller's words never
  answered to the end) and asked for a reply again, a second "Your table is booked.". Fixed:
  audio playing out (the playout ledger's started, unreported segment) is no thinking without
  speech.
"""

from __future__ import annotations

import pytest

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import agents
from resilient_agent.testing import LLMRule, Scenario, ToolCallScript, Utterance, run_scenario


def call(
    name: str,
    style: str,
    work_s: float,
    preamble: bool,
    *extra: tuple[float, float, str],
    duration: float,
) -> Scenario:
    return Scenario(
        name=name,
        family="fuzz",
        description=name,
        agent=agents.booking_agent(style, work_seconds=work_s),  # type: ignore[arg-type]
        utterances=(
            Utterance(1.0, 2.8, "please book a table for eight", reply_within=20.0),
            *(Utterance(s, e, w, reply_within=20.0) for s, e, w in extra),
        ),
        llm=(
            LLMRule(
                text="Let me check the reservation book for you right now." if preamble else "",
                when_user_says="book",
                tool_calls=(ToolCallScript("book_table", {"time": "eight"}),),
            ),
            LLMRule(text="Your table is booked.", after_tool="book_table"),
        ),
        duration=duration,
        reply_bound=20.0,
    )


CALLS = {
    "first_word_at_protected_say": (
        call(
            "first_word_at_protected_say",
            "protected_say",
            1.43,
            False,
            (6.44, 7.27, "marble pencil"),
            (7.71, 9.25, "button ticket planet copper"),
            duration=29.25,
        ),
        "utterance 2 (6.4-7.3s): 1 word(s) never reached the LLM",
    ),
    "two_words_around_protected_say": (
        call(
            "two_words_around_protected_say",
            "protected_say",
            1.96,
            False,
            (5.57, 7.58, "ticket dragon garden silver marble"),
            (7.92, 8.93, "castle candle planet"),
            (11.17, 12.55, "apple lemon copper mirror"),
            duration=32.55,
        ),
        "utterance 2 (5.6-7.6s): 2 word(s) never reached the LLM",
    ),
    "answer_heard_twice": (
        call(
            "answer_heard_twice",
            "disallow_and_say",
            1.29,
            True,
            (4.01, 5.79, "copper castle silver planet candle"),
            (6.42, 8.23, "tunnel lemon apple button mirror"),
            (9.23, 10.47, "saddle garden window anchor"),
            duration=30.47,
        ),
        "answer heard 2 times: 'Your table is booked.'",
    ),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_seeded_call_passes_on_resilient_agent(name: str) -> None:
    scenario, known_failure = CALLS[name]
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert known_failure not in outcome.reasons
    assert outcome.passed, outcome.reasons
