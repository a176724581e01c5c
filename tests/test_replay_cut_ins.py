"""Words a caller says over a deliberate cut-in, round-tripped through livekit's report."""

from __future__ import annotations

from pathlib import Path

import pytest

from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.replay.round_trip import round_trip
from resilient_agent.lab.run import RESILIENT_PATH, load_agent_class


@pytest.mark.parametrize(
    "name",
    [
        # livekit's user_turn_limit cut in at the second final transcript; the words said over
        # the cut-in come back only in the message ResilientAgent committed after it
        "turn_limit/words_over_cut_in",
        # the app's protected announcement inside cut_in() played over the caller, unheld
        "turn_limit/words_over_app_cut_in",
    ],
)
def test_words_over_a_cut_in_are_replayed_where_they_were_said(tmp_path: Path, name: str) -> None:
    scenario = next(s for s in CATALOG if s.name == name)
    trip = round_trip(scenario, load_agent_class(RESILIENT_PATH), tmp_path)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict


def test_a_cut_in_line_is_marked_in_the_report_on_resilient_agent_only() -> None:
    """The report says which line the app played over the caller inside cut_in(): nothing
    else in it tells a cut-in from a protected line ResilientAgent would have held."""
    from livekit.agents import Agent

    from resilient_agent._session.cut_in import CUT_IN_EXTRA
    from resilient_agent.lab.catalog.turn_handling import ANNOUNCEMENT
    from resilient_agent.lab.replay.emit import trimmed_report
    from resilient_agent.lab.replay.plan import load_plan
    from resilient_agent.testing import run_scenario
    from resilient_agent.testing.session_report import session_report

    scenario = next(s for s in CATALOG if s.name == "turn_limit/words_over_app_cut_in")
    marks = {}
    for cls in (Agent, load_agent_class(RESILIENT_PATH)):
        world, _ = run_scenario(scenario, cls)
        report = session_report(world)
        items = report["chat_history"]["items"]
        # an emitted test's report keeps the mark: its replay plays the line as a cut-in too
        slim = [e["item"] for e in trimmed_report(report)["events"] if "item" in e]
        assert load_plan(report).app_says == load_plan(trimmed_report(report)).app_says
        assert any(CUT_IN_EXTRA in i.get("extra", {}) for i in slim) == (cls is not Agent)
        marks[cls.__name__] = {
            " ".join(i["content"]): i["extra"].get(CUT_IN_EXTRA, False)
            for i in items
            if i.get("role") == "assistant"
        }
    assert marks["ResilientAgent"] == {
        ANNOUNCEMENT: True,
        "Sure: do you have a table for two tonight.": False,
    }
    assert marks["Agent"] == {ANNOUNCEMENT: False, "Sure: do you.": False}


def test_the_cut_is_read_from_the_report_of_a_plain_agent_too() -> None:
    """On Agent the words over the cut-in are lost: placeholders from the cut to the turn's
    end, at the transcribed words' pace; a caller whose last final came after their last word,
    before the VAD's end of speech reached livekit, was cut at that final too."""
    from livekit.agents import Agent

    from resilient_agent.lab.replay.plan import load_plan
    from resilient_agent.testing import run_scenario
    from resilient_agent.testing.session_report import session_report

    plans = {}
    for name in ("turn_limit/words_over_cut_in", "control/turn_limit_cut_in"):
        world, _ = run_scenario(next(s for s in CATALOG if s.name == name), Agent)
        plans[name] = load_plan(session_report(world))
    cut = plans["turn_limit/words_over_cut_in"]
    assert cut.turn_limit == 22  # 13 + 9 words: the second final reached livekit's 15
    turn = cut.turns[0]
    assert [n for _, _, n in turn.windows] == [13, 9, turn.unheard_after]
    assert turn.windows[2][:2] == (5.5, 7.6)
    assert turn.unheard_after > 0
    assert plans["control/turn_limit_cut_in"].turn_limit is not None
