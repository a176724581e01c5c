"""Fuzzed calls on an app's own tools (``resilient-agent lab --fuzz N --agent module:Class``).

Beside the generator's own apps (:mod:`.fuzz_recipe`), the fuzzer draws calls on the tools of
the class under test: a tool, an onset anywhere from the caller's request to the end of that
tool's probe call (for an end-call tool, to just after its goodbye), and how long the caller's
question lasts. Each call is a pure function of ``(seed, index)`` and the probed windows, and
prints as a snippet that rebuilds it with
:func:`~resilient_agent.lab.catalog.own_tools.own_tool_scenario`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ..testing import Scenario
from .app_tools import ToolMocks
from .catalog.own_tools import FAMILY, ToolWindows, question_scenario, question_span

__all__ = ["OWN_TOOL_SHARE", "OwnToolCall", "OwnTools", "draw_own_tool_call"]

OWN_TOOL_SHARE = 0.5
"""The share of fuzzed calls drawn on the app's own tools when the class has any."""
_QUESTION_RANGE_S = (0.6, 2.5)


@dataclass(frozen=True)
class OwnTools:
    """The app's tools as the fuzzer draws on them.

    Attributes:
        agent: ``module:Class`` of the app's class, as given to ``--agent``.
        windows: Every tool, probed.
        mocks: The ``--mock`` file's mocks and arguments.
        mock_path: That file, as given, for the snippets.
    """

    agent: str
    windows: Sequence[ToolWindows]
    mocks: ToolMocks
    mock_path: str | None = None


@dataclass(frozen=True)
class OwnToolCall:
    """One fuzzed call on an app's own tool.

    Attributes:
        name: The scenario's name.
        window: The tool, as its probe found it.
        onset: Call seconds the caller's question starts.
        question_s: How long the question lasts.
        own: The app's tools it was drawn from.
    """

    name: str
    window: ToolWindows
    onset: float
    question_s: float
    own: OwnTools

    def scenario(self) -> Scenario:
        """The scenario the lab runs."""
        return question_scenario(
            self.window,
            self.own.mocks,
            name=self.name,
            description=(
                f"A fuzzed call on your tool {self.window.tool.name}: the caller asks a "
                f"question at {self.onset:g}s."
            ),
            onset=self.onset,
            question_s=self.question_s,
        )

    def source(self) -> str:
        """A snippet that rebuilds this call and runs it, from the app's directory."""
        agent, mock = self.own.agent, self.own.mock_path
        mock_argument = f", mock={mock!r}" if mock is not None else ""
        return "\n".join(
            [
                "from resilient_agent.lab.catalog.own_tools import own_tool_scenario",
                "from resilient_agent.testing import run_scenario",
                "",
                "scenario, cls = own_tool_scenario(",
                f"    {agent!r}, {self.window.tool.name!r}, onset={self.onset!r}, "
                f"question_s={self.question_s!r}{mock_argument}",
                ")",
                "world, outcome = run_scenario(scenario, cls)",
                "print(outcome.reasons)",
            ]
        )


def draw_own_tool_call(seed: int, index: int, own: OwnTools) -> OwnToolCall | None:
    """The ``index``-th call of the run seeded ``seed`` if it falls on an own tool, else None.

    Calls fall on the app's own tools with probability :data:`OWN_TOOL_SHARE` when any tool's
    probe ran it; the rest are the generator's own apps.
    """
    raced = [w for w in own.windows if w.ran]
    rng = random.Random(f"resilient-agent-fuzz-own-tools:{seed}:{index}")
    if not raced or rng.random() >= OWN_TOOL_SHARE:
        return None
    window = rng.choice(raced)
    earliest, latest = question_span(window)
    onset = round(rng.uniform(earliest, max(earliest, latest)), 2)
    question_s = round(rng.uniform(*_QUESTION_RANGE_S), 2)
    name = f"{FAMILY}/{window.tool.name}/fuzz-{seed}-{index}"
    return OwnToolCall(name, window, onset, question_s, own)
