"""What ``--fuzz N --explore M`` found on ResilientAgent, as the shrunk calls it printed.

* ``typed_over_held_preamble_answered_twice`` (seed 7331, call 76; fixed): found under all of the
  call's schedules, and shrunk to a call that fails on the lab's own timing too. A booking tool
  protects its preamble (``disallow_interruptions()``, 2 s of work). The caller talks over the
  preamble's start (3.68 s, 30 ms after it began), so WaitForCaller holds it until they stop
  (6.98 s), and the tool finishes meanwhile. At 10.07 s, while the preamble plays on, the
  caller types a message: livekit's text input cannot interrupt the protected preamble, so its
  reply (the typed words, with the recovered spoken ones merged in before them) is queued after
  it, its inference made at once. When the preamble ends (10.39 s), livekit adds the tool's call
  and output to the context, stamped when they were made (before the typed message), and makes
  the tool reply: its context ends in the typed message, so it answered it, and the caller heard
  "Sure: any quiet corner seats." twice and never heard the booking confirmed.

  ``ContextIntegrity`` now also watches the replies started while a tool's result waits for its
  reply, and the tool reply (the first inference to carry the tool's output) goes without the
  messages such a reply answers: the caller hears the answer, then the booking confirmed. Plain
  ``Agent`` has no such reply to queue: livekit skips the typed message (and the spoken words)
  while the protected preamble plays.

* ``question_cut_while_the_tool_runs`` (the CI fuzz's seed 18, call 67; what the fix above first
  broke on livekit-agents 1.8.0, the declared floor, passing on later versions). A booking tool
  works 7.95 s without a preamble. The caller's second and third utterances get a reply while it
  runs (8.38 s), cut at 10.63 s before it was heard, the caller saying a fourth, whose reply
  (10.98 s) must answer them too. livekit 1.8.0 gives the running tool's placeholder output a new
  id at each inference, so that reply's context carried an output no earlier inference had
  carried, and was taken for the tool reply: it went without the earlier question, never
  answered. A tool's result is now an output livekit committed to ``session.history`` (it does
  before the tool reply; a placeholder never is).
"""

from __future__ import annotations

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import agents
from resilient_agent.testing import (
    LLMRule,
    Scenario,
    ToolCallScript,
    Typed,
    Utterance,
    run_scenario,
)

# as printed by: resilient-agent lab --fuzz 150 --explore 4 --seed 7331 --agent
# resilient_agent:ResilientAgent (shrunk from fuzz/7331-76: a fourth utterance dropped, the
# tool's work 6.14 s -> 2.0 s); fuzz/7331-76 failed under each of its four schedules
TYPED_OVER_HELD_PREAMBLE = Scenario(
    name="fuzz/7331-76-shrunk",
    family="fuzz",
    description="A fuzzed call: agents.booking_agent(style='disallow', work_seconds=2.0).",
    agent=agents.booking_agent(style="disallow", work_seconds=2.0),
    utterances=(
        Utterance(1.0, 2.45, "please book a table for eight", reply_within=19.76),
        Utterance(3.68, 4.92, "bridge harbor jasmine", reply_within=17.29),
        Utterance(5.33, 6.43, "yellow hammock", reply_within=15.78),
    ),
    llm=(
        LLMRule(
            text="Let me check the reservation book for you right now.",
            tool_calls=(ToolCallScript(name="book_table", arguments={"time": "eight"}),),
            when_user_says="book",
        ),
        LLMRule(text="Your table is booked.", after_tool="book_table"),
    ),
    typed=(Typed(at=10.07, text="any quiet corner seats", reply_within=12.14),),
    reply_bound=12.14,
    duration=28.21,
)


def test_typed_over_held_preamble_is_answered_once() -> None:
    _, outcome = run_scenario(TYPED_OVER_HELD_PREAMBLE, ResilientAgent)
    assert "answer heard 2 times: 'Sure: any quiet corner seats.'" not in outcome.reasons
    assert outcome.passed, outcome.reasons


# as printed by the CI fuzz (tests/test_fuzz.py, seed 18, call 67)
QUESTION_CUT_WHILE_THE_TOOL_RUNS = Scenario(
    name="fuzz/18-67",
    family="fuzz",
    description="A fuzzed call: agents.booking_agent(style='plain', work_seconds=7.95).",
    agent=agents.booking_agent(style="plain", work_seconds=7.95),
    utterances=(
        Utterance(1.0, 2.91, "please book a table for eight", reply_within=21.47),
        Utterance(4.7, 5.34, "dragon", reply_within=19.04),
        Utterance(5.4, 7.83, "koala candle anchor jasmine button", reply_within=16.55),
        Utterance(8.47, 10.43, "lantern apple castle walnut", reply_within=13.95),
    ),
    llm=(
        LLMRule(
            text="",
            tool_calls=(ToolCallScript(name="book_table", arguments={"time": "eight"}),),
            when_user_says="book",
        ),
        LLMRule(text="Your table is booked.", after_tool="book_table"),
    ),
    reply_bound=13.95,
    duration=36.33,
)


def test_a_question_whose_reply_was_cut_while_the_tool_ran_is_answered() -> None:
    _, outcome = run_scenario(QUESTION_CUT_WHILE_THE_TOOL_RUNS, ResilientAgent)
    assert outcome.passed, outcome.reasons
