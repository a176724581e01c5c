"""The catalog's lab calls, shared by the suite's test files (the ``lab_calls`` fixture).

Several files judge the same catalog call on the same agent (tests/test_lab.py runs the whole
catalog on ``Agent``, tests/test_resilient_agent.py the controls on both agents, the report tests
a few races on both). A lab call is a pure function of the scenario and the agent (virtual time;
tests/test_lab.py checks that repeated runs give the same records), so each runs once per
session and every file reads the same :class:`LabResult`. Only the catalog's own scenarios are
shared: a test that builds or changes a scenario runs it itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from resilient_agent.lab.catalog import scenarios
from resilient_agent.lab.run import AgentUnderTest, LabResult, run_lab
from resilient_agent.testing import Scenario

__all__ = ["LabCalls"]


class LabCalls:
    """Each (catalog scenario, agent under test) run once, on first request."""

    def __init__(self) -> None:
        self._catalog = {s.name: s for s in scenarios()}
        self._done: dict[tuple[str, AgentUnderTest], LabResult] = {}

    def results(
        self, chosen: Sequence[Scenario], agents: Sequence[AgentUnderTest]
    ) -> list[LabResult]:
        """What ``run_lab(chosen, agents)`` returns, in its order, each call run at most once."""
        for scenario in chosen:
            if self._catalog.get(scenario.name) is not scenario:
                raise ValueError(
                    f"{scenario.name}: not the catalog's own scenario, run it yourself"
                )
        for scenario in chosen:
            for agent in agents:
                if (scenario.name, agent) not in self._done:
                    (self._done[scenario.name, agent],) = run_lab([scenario], [agent])
        return [self._done[s.name, a] for s in chosen for a in agents]
