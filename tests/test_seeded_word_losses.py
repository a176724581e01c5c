"""Three seeded random calls of another generator that still fail on ResilientAgent.

Each is built only from the project's public API, as reported. They are kept here as strict
expected failures: each reproduces its loss deterministically (the test fails the day a fix
makes it pass, so the marker must then go). What is known so far, from their timelines:

* ``first_word_at_protected_say``: "marble" (6.44 s) is said while the tool's protected hold
  message plays (4.00-6.89 s); livekit withholds that audio from the STT, and the keeper's
  withheld-audio recovery (9.80 s) re-transcribes 3.31 s of it, from 6.49 s: the window starts
  after the word's onset, so "pencil" onwards is recovered and "marble" is not.
* ``two_words_around_protected_say``: the same window, at both ends of a protected speech.
* ``answer_heard_twice``: "Your table is booked." plays twice.
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


@pytest.mark.xfail(strict=True, reason="reproduced, not fixed yet (see the module docstring)")
@pytest.mark.parametrize("name", sorted(CALLS))
def test_seeded_call_passes_on_resilient_agent(name: str) -> None:
    scenario, known_failure = CALLS[name]
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert known_failure not in outcome.reasons
    assert outcome.passed, outcome.reasons
