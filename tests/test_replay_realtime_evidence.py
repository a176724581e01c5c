"""What a realtime call's report shows by its absences, replayed.

A reply cut by its server's error (the error's time and the part that played), a goodbye that
never came (a tool's output asked for it and the agent thought until the close), a line Gemini
cut as the caller began, with none of their words transcribed before the close.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.replay import load_plan
from resilient_agent.lab.replay.emit import trimmed_report
from resilient_agent.lab.replay.round_trip import round_trip
from resilient_agent.testing import Scenario, run_scenario
from resilient_agent.testing.session_report import session_report

_CUT = "realtime/gemini/reply_cut_by_server_error"
_HUNG_GOODBYE = "realtime/openai/livekit_goodbye_never_comes"
_BARGE_IN = "realtime/gemini/question_over_livekit_goodbye"


def _scenario(name: str) -> Scenario:
    return next(s for s in CATALOG if s.name == name)


@pytest.mark.parametrize(
    ("name", "agent_class"),
    [
        # the server's 1011 halfway through the answer: half of it played, then nothing on
        # Agent; ResilientAgent asked for it again
        (_CUT, Agent),
        (_CUT, ResilientAgent),
        # the goodbye livekit's EndCallTool asked for never came: ResilientAgent gave up on it
        # after 5 s and hung up
        (_HUNG_GOODBYE, ResilientAgent),
        # Gemini cut its goodbye as the caller began a question; the session closed then
        (_BARGE_IN, Agent),
    ],
)
@pytest.mark.parametrize("recorded", [True, False], ids=["recording", "transcripts"])
def test_the_call_round_trips(
    tmp_path: Path, name: str, agent_class: type[Agent], recorded: bool
) -> None:
    trip = round_trip(_scenario(name), agent_class, tmp_path if recorded else None)
    if (name, agent_class) == (_CUT, ResilientAgent):
        # the cut line plays at the lab voice's length (1.6 s, the call's 1.9 s), so the reply
        # asked for after it begins early: when a line began is all that differs
        assert trip.divergences, "the cut line now plays at the call's length: expect faithful"
        assert all("the agent's line 2" in str(d) for d in trip.divergences), trip.divergences
    else:
        assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


def test_a_reply_cut_by_the_servers_error_is_read_from_the_error_and_what_played() -> None:
    world, _ = run_scenario(_scenario(_CUT), ResilientAgent)
    plan = load_plan(session_report(world))
    cut, again = plan.answers
    # the part that played is all the model sent: its stream ran until the error
    assert cut.cut_by_error and not again.cut_by_error
    assert (cut.text, cut.at + cut.duration) == ("Your parcel is at the", pytest.approx(3.9))
    # asked again with nothing from the caller since: its context ends in the cut line
    assert (again.after_user, again.after_line) == (None, "Your parcel is at the")
    assert any(
        a.startswith("at 3.90 s: the model's server failed") and "'Your parcel is at the'" in a
        for a in plan.assumptions
    )


def test_a_goodbye_that_never_came_is_a_hung_reply_to_livekits_end_call_tool() -> None:
    world, _ = run_scenario(_scenario(_HUNG_GOODBYE), Agent)
    plan = load_plan(session_report(world))
    (run,) = plan.tool_runs
    assert run.name == "end_call" and run.livekit_end_call
    (answer,) = [a for a in plan.answers if a.after_tool == "end_call"]
    assert answer.hung and answer.text == ""
    assert any("never came" in a for a in plan.assumptions)
    assert any("livekit's EndCallTool" in a for a in plan.assumptions)


def test_a_line_gemini_cut_as_the_call_closed_was_cut_by_the_caller() -> None:
    world, _ = run_scenario(_scenario(_BARGE_IN), Agent)
    plan = load_plan(session_report(world))
    # the goodbye stopped at 4.61 s and the session closed then, no word of the caller's
    # transcribed: they began a frame before
    assert plan.barge_ins == (4.6,)
    assert any(a.startswith("at 4.60 s: the caller began to speak") for a in plan.assumptions)


@pytest.mark.parametrize("name", [_CUT, _HUNG_GOODBYE, _BARGE_IN])
def test_an_emitted_test_keeps_what_a_realtime_replay_reads(name: str) -> None:
    # --emit-test inlines the report trimmed to what the replay reads: a realtime call's item
    # ids, response ids and model errors with it
    world, _ = run_scenario(_scenario(name), Agent)
    report = session_report(world)
    assert load_plan(trimmed_report(report, recording=True)) == load_plan(report)
