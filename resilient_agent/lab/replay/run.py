"""Runs a replay plan on an agent class and reads the replayed call back as livekit reports it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from livekit.agents import Agent

from ...testing import CallOutcome, run_scenario
from ...testing.runner import CallWorld
from ...testing.session_report import session_report
from .fidelity import Divergence, divergences
from .plan import ReplayPlan, load_plan
from .recording import ReplayRecording
from .scenario import replay_scenario
from .typed_claims import with_recorded_claims
from .vad_evidence import with_vad_evidence

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


def run_replay(
    plan: ReplayPlan,
    agent_class: type[Agent],
    name: str = "replay/call",
    *,
    app: bool = False,
    tool_mocks: Mapping[str, Callable[..., Any]] | None = None,
    recording: ReplayRecording | None = None,
) -> ReplayRun:
    """Replay ``plan`` on virtual time.

    Args:
        plan: The recorded call.
        agent_class: The base class of the replayed agent, or with ``app`` the app's class.
        name: The scenario's name.
        app: ``agent_class`` is the app's own (its tools run, see :func:`replay_scenario`).
        tool_mocks: With ``app``: tool name to the callable run instead of that tool.
        recording: The call's audio recording, played as the caller's line.
    """
    if recording is not None:
        # what the recording tells of the report's turns, on both sides: the replay's caller is
        # the same recording
        plan = with_vad_evidence(with_recorded_claims(plan, recording), recording)
    scenario = replay_scenario(plan, name, app=app, tool_mocks=tool_mocks, recording=recording)
    world, outcome = run_scenario(scenario, agent_class)
    replayed = load_plan(session_report(world))
    if recording is not None:
        replayed = with_recorded_claims(replayed, recording)
    return ReplayRun(world, outcome, replayed, tuple(divergences(plan, replayed)))
