"""Catalog calls whose replay once diverged from the recording, round-tripped on plain Agent."""

from __future__ import annotations

import pytest
from livekit.agents import Agent

from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.replay.round_trip import round_trip


@pytest.mark.parametrize(
    "name",
    [
        # the caller left during the goodbye: livekit closes the session its own time later
        "control/caller_leaves_during_goodbye",
        # the app hung up once the caller cut its goodbye; the line's message came at the close
        "end_call/app_shutdown_from_farewell_callback",
        # the transfer tool handed the call over; the front desk's on_exit took 2 s
        "lost_words/during_handoff",
        # GetEmailTask(allow_interruptions=False): the caller's email over its question is lost
        "workflows/email_over_protected_task_question",
    ],
)
def test_the_call_round_trips(name: str) -> None:
    scenario = next(s for s in CATALOG if s.name == name)
    trip = round_trip(scenario, Agent)
    assert trip.faithful, trip.divergences
    assert trip.verdict == trip.replayed_verdict
