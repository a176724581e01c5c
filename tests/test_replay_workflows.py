"""Replaying a workflow: the agents a call was handed to, rebuilt from the report's handoffs."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from livekit.agents import Agent

from resilient_agent.lab.catalog import CATALOG
from resilient_agent.lab.replay import load_plan, run_replay
from resilient_agent.lab.replay.emit import trimmed_report
from resilient_agent.lab.replay.fidelity import divergences
from resilient_agent.lab.replay.handoffs import Handoff
from resilient_agent.testing import run_scenario
from resilient_agent.testing.session_report import session_report


def _report(name: str) -> dict[str, Any]:
    scenario = next(s for s in CATALOG if s.name == name)
    world, _ = run_scenario(scenario, Agent)
    return session_report(world)


@pytest.fixture(scope="module")
def group_report() -> dict[str, Any]:
    """The app's tool awaits a TaskGroup of GetEmailTask and GetAddressTask."""
    return _report("workflows/control_task_group")


@pytest.fixture(scope="module")
def desk_report() -> dict[str, Any]:
    """The app's tool returns a plain booking desk, whose tool says a protected hold line."""
    return _report("workflows/control_plain_target_tool")


def test_the_plan_reads_a_task_group_awaited_by_a_tool(group_report: dict[str, Any]) -> None:
    plan = load_plan(group_report)
    assert [h.new for h in plan.handoffs] == [
        "front_desk",
        "task_group",
        "get_email_task",
        "task_group",
        "get_address_task",
        "task_group",
        "front_desk",
    ]
    (collect,) = [r for r in plan.tool_runs if r.name == "collect_details"]
    assert collect.agent == "front_desk"
    (group,) = collect.tasks
    assert group.agent == "task_group" and not group.by_tool
    # each subtask completed by its confirmation tool; the group 0.5 s later (its summary)
    assert [(t.agent, t.by_tool) for t in group.subtasks] == [
        ("get_email_task", True),
        ("get_address_task", True),
    ]
    assert group.completes_after == 0.5
    confirms = [r for r in plan.tool_runs if r.name.startswith("confirm_")]
    assert [(r.agent, r.completes_task, r.reply_required) for r in confirms] == [
        ("get_email_task", True, False),
        ("get_address_task", True, False),
    ]
    # each task's question answers its entry, not the caller's last words
    questions = [a for a in plan.answers if a.on_enter is not None]
    assert [(a.on_enter, a.text) for a in questions] == [
        ("get_email_task", "What is your email address?"),
        ("get_address_task", "What is your postal address?"),
    ]


def test_a_task_group_replays_as_a_task_group(group_report: dict[str, Any]) -> None:
    plan = load_plan(group_report)
    replayed = run_replay(plan, Agent)
    assert replayed.divergences == (), [str(d) for d in replayed.divergences]
    assert replayed.replayed.handoffs == plan.handoffs


def test_a_plain_handoff_is_made_by_the_tool_that_returned_the_target(
    desk_report: dict[str, Any],
) -> None:
    plan = load_plan(trimmed_report(desk_report))  # what an emitted test carries is enough
    (transfer,) = [r for r in plan.tool_runs if r.name == "transfer_to_bookings"]
    assert transfer.hands_off_to == "booking_desk" and not transfer.tasks
    (book,) = [r for r in plan.tool_runs if r.name == "book_table"]
    assert book.agent == "booking_desk" and book.says[0].text.startswith("One moment")
    replayed = run_replay(plan, Agent)
    assert replayed.divergences == (), [str(d) for d in replayed.divergences]


def test_a_replay_handed_to_other_agents_diverges(desk_report: dict[str, Any]) -> None:
    plan = load_plan(desk_report)
    elsewhere = (plan.handoffs[0], Handoff(plan.handoffs[1].at, "front_desk", "billing_desk"))
    later = tuple(dataclasses.replace(h, at=h.at + 0.5) for h in plan.handoffs)
    (other,) = divergences(plan, dataclasses.replace(plan, handoffs=elsewhere))
    assert other.what == (
        "the agents took the call as front_desk -> billing_desk, not front_desk -> booking_desk"
    )
    late = divergences(plan, dataclasses.replace(plan, handoffs=later))
    assert [d.what for d in late] == [
        "front_desk took the call at 0.500 s, not 0.000 s",
        "booking_desk took the call at 3.950 s, not 3.450 s",
    ]
