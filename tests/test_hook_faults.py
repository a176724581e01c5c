"""Cancellation hygiene over the catalog: a hook that fails, even by cancelling, costs no turn.

A first middleware (``HookFaults``) raises once in each of its hooks: a stray ``CancelledError``
in the first transcript, user turn and tool call, an exception in the first inference. Before
the boundaries told a stray cancellation from their task being cancelled, a cancelling
``wrap_user_turn`` ended livekit's user-turn task and lost the turn it ran for.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from livekit.agents import Agent
from resilient_agent.middleware import default_middleware

from resilient_agent import Middleware, MiddlewareContext, ResilientAgent, UserTurn, UserTurnNext
from resilient_agent.lab.catalog import scenarios
from resilient_agent.testing import Scenario, Utterance, run_scenario
from resilient_agent.testing.hook_faults import HookFaults

# a stray cancellation is told from the task's own by Task.cancelling(), new in Python 3.11
pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="before Python 3.11 a task cannot tell a stray CancelledError from its own "
    "cancellation (Task.cancelling), so a cancelling hook still ends livekit's task there",
)


def first_of_each_family() -> list[Scenario]:
    found: dict[str, Scenario] = {}
    for scenario in scenarios():
        found.setdefault(scenario.family, scenario)
    return list(found.values())


REPRESENTATIVE = first_of_each_family()


def with_faults(faults: Middleware) -> type[ResilientAgent]:
    class Faulty(ResilientAgent):
        def __init__(self, *args: Any, middleware: Any = None, **kwargs: Any) -> None:
            chain = default_middleware() if middleware is None else list(middleware)
            super().__init__(*args, middleware=[faults, *chain], **kwargs)

    return Faulty


@pytest.mark.parametrize("scenario", REPRESENTATIVE, ids=[s.name for s in REPRESENTATIVE])
def test_a_call_with_failing_hooks_goes_as_without_them(scenario: Scenario) -> None:
    faults = HookFaults()
    world, outcome = run_scenario(scenario, with_faults(faults))
    assert outcome.passed, outcome.reasons
    assert faults.injected  # the faults did happen
    report = world.agent.call_report  # type: ignore[attr-defined]
    if report is not None:
        assert {f"HookFaults.{hook}" for hook in faults.injected} <= set(report.middleware_errors)


class CancelsTheFirstTurn(Middleware):
    def __init__(self) -> None:
        self.turns = 0

    async def wrap_user_turn(
        self, ctx: MiddlewareContext, turn: UserTurn, call_next: UserTurnNext
    ) -> None:
        self.turns += 1
        if self.turns == 1:
            raise asyncio.CancelledError  # a stray cancellation: nobody cancelled the turn
        await call_next(turn)


def _two_turns(agent: Any) -> Scenario:
    return Scenario(
        name="t/two_turns",
        family="t",
        description="",
        agent=agent,
        utterances=(
            Utterance(1.0, 2.0, "what time is it"),
            Utterance(6.0, 7.0, "where are you located"),
        ),
        duration=14.0,
    )


def test_a_stray_cancellation_in_the_turn_hook_loses_the_turn_on_a_plain_agent() -> None:
    class Cancelling(Agent):
        turns = 0

        async def on_user_turn_completed(self, turn_ctx: Any, new_message: Any) -> None:
            type(self).turns += 1
            if type(self).turns == 1:
                raise asyncio.CancelledError

    _, plain = run_scenario(_two_turns(lambda base: Cancelling(instructions="x")), Agent)
    assert "utterance 1 (1.0-2.0s): never answered audibly to the end" in plain.reasons
    assert plain.reply_latencies_s[1] is not None  # livekit 1.8.9 still answers the next turn

    def build(base: type[Agent]) -> Agent:
        return base(instructions="x", middleware=[CancelsTheFirstTurn()])

    _, outcome = run_scenario(_two_turns(build), ResilientAgent)
    assert outcome.passed, outcome.reasons
