"""Runs a replay plan on an agent class and reads the replayed call back as livekit reports it."""

from __future__ import annotations

from dataclasses import dataclass

from livekit.agents import Agent

from ...testing import CallOutcome, run_scenario
from ...testing.runner import CallWorld
from ...testing.session_report import session_report
from .fidelity import Divergence, divergences
from .plan import ReplayPlan, load_plan
from .scenario import replay_scenario

__all__ = ["ReplayRun", "run_replay"]


@dataclass(frozen=True)
class ReplayRun:
    """One replay of a recorded call on one agent class.

    Attributes:
        world: The replayed call.
        outcome: The lab's contracts on it.
        replayed: The replayed call as livekit's report tells it, read back into a plan.
        divergences: How it differs from the recording.
    """

    world: CallWorld
    outcome: CallOutcome
    replayed: ReplayPlan
    divergences: tuple[Divergence, ...]


def run_replay(plan: ReplayPlan, agent_class: type[Agent], name: str = "replay/call") -> ReplayRun:
    """Replay ``plan`` with its agent built on ``agent_class`` (virtual time)."""
    world, outcome = run_scenario(replay_scenario(plan, name), agent_class)
    replayed = load_plan(session_report(world))
    return ReplayRun(world, outcome, replayed, tuple(divergences(plan, replayed)))
