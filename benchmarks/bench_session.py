"""A 100-turn scripted lab session: CPU time of ResilientAgent over plain Agent, and latencies.

Both agents run the same 100-turn call in the same process, alternating, five times each; the
figure is the ratio of the best CPU times. End-of-turn to first-audio latencies must be identical.
"""

from __future__ import annotations

import time

from livekit.agents import Agent

from resilient_agent import ResilientAgent
from resilient_agent.lab import agents
from resilient_agent.testing import Scenario, Utterance, run_scenario

TURNS = 100
TURN_SECONDS = 6.0


def _scenario() -> Scenario:
    utterances = tuple(
        Utterance(1.0 + i * TURN_SECONDS, 2.5 + i * TURN_SECONDS, f"question number {i} please")
        for i in range(TURNS)
    )
    return Scenario(
        name="bench/100_turns",
        family="bench",
        description="100 ordinary turns.",
        agent=agents.plain_agent,
        utterances=utterances,
        duration=TURNS * TURN_SECONDS + 2.0,
    )


def _run(agent_class: type[Agent]) -> tuple[float, list[float | None], bool]:
    scenario = _scenario()
    started = time.process_time()
    _, outcome = run_scenario(scenario, agent_class)
    return time.process_time() - started, outcome.reply_latencies_s, outcome.passed


def main() -> None:
    """Print CPU seconds, their ratio and whether the latencies match."""
    cpu: dict[str, list[float]] = {"Agent": [], "ResilientAgent": []}
    latencies: dict[str, list[float | None]] = {}
    for _ in range(5):
        for label, cls in (("Agent", Agent), ("ResilientAgent", ResilientAgent)):
            seconds, per_turn, passed = _run(cls)
            assert passed, f"{label} failed the 100-turn call"
            cpu[label].append(seconds)
            latencies[label] = per_turn
    base, resilient = min(cpu["Agent"]), min(cpu["ResilientAgent"])
    print(f"100-turn session CPU: Agent {base:.2f}s, ResilientAgent {resilient:.2f}s")
    print(f"CPU ratio ResilientAgent/Agent: {resilient / base:.3f}")
    same = latencies["Agent"] == latencies["ResilientAgent"]
    values = [v for v in latencies["Agent"] if v is not None]
    print(
        f"end-of-turn to first audio: Agent mean {sum(values) / len(values):.3f}s; "
        f"identical for all {TURNS} turns: {same}"
    )


if __name__ == "__main__":
    main()
