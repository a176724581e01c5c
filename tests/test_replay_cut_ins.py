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
