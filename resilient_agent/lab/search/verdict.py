"""What a search keeps of one judged call: the contracts it broke, as the catalog judges them."""

from __future__ import annotations

from dataclasses import dataclass

from ...testing import CallOutcome, Scenario
from ...testing.schedule import Delivery
from ..run import AgentUnderTest, run_lab

__all__ = ["AT_WAIT_BOUND", "CONTRACTS", "Verdict", "contracts_broken", "judge"]

# Each contract and how its broken-contract lines start or read (testing/contracts.py).
CONTRACTS: tuple[tuple[str, str], ...] = (
    ("lost_words", "never reached the LLM"),
    ("unanswered", "never answered audibly"),
    ("talk_over", "over the caller"),
    ("late_answer", ": answered after"),
    ("answered_twice", "answer heard"),
    ("stuck_speaking", "stuck at 'speaking'"),
    ("unfinished_speech", "never finished"),
    ("forced_cancel", "speech not done in time"),
    ("deadlock", "could not be closed"),
    ("hang_up", "hung up although"),
    ("no_hang_up", "call was not ended"),
)
AT_WAIT_BOUND = "talk_over_at_wait_bound"


def contracts_broken(outcome: CallOutcome) -> tuple[str, ...]:
    """The names of the contracts ``outcome`` broke, in :data:`CONTRACTS` order.

    A protected speech that played over a caller once WaitForCaller's bound was over
    (``past_bound="speak"``: past ``max_wait_s`` while they were still saying words, or at
    ``wait_s`` when nothing showed they were) follows a documented policy: it is
    ``talk_over_at_wait_bound``, reported apart and not a failure.
    """
    found = []
    for name, marker in CONTRACTS:
        if any(marker in reason for reason in outcome.reasons):
            found.append(name)
    spoke_at_bound = any(e.get("action") == "spoke_at_bound" for e in outcome.race_events)
    if "talk_over" in found and spoke_at_bound:
        found[found.index("talk_over")] = AT_WAIT_BOUND
    known = [m for _, m in CONTRACTS]
    if any(not any(m in reason for m in known) for reason in outcome.reasons):
        found.append("other")
    return tuple(found)


@dataclass(frozen=True)
class Verdict:
    """One judged call, small enough for a worker process to send back.

    Attributes:
        contracts: The contracts it broke (empty when it passed).
        reasons: The broken-contract lines.
        wall_seconds: Real seconds the call took.
        virtual_seconds: Call seconds simulated.
        late: Under an explored schedule, the deliveries it made late, with their lateness.
    """

    contracts: tuple[str, ...]
    reasons: tuple[str, ...]
    wall_seconds: float
    virtual_seconds: float
    late: tuple[tuple[Delivery, float], ...] = ()

    def breaks_any(self, contracts: set[str]) -> bool:
        """Whether this call broke one of ``contracts``."""
        return bool(set(self.contracts) & contracts)


def judge(scenario: Scenario, agent: AgentUnderTest) -> Verdict:
    """Run ``scenario`` on ``agent`` and judge it.

    Raises:
        RuntimeError: The scenario's app code could not be built on the agent's class.
    """
    results = run_lab([scenario], [agent])
    if not results:
        # the adapter replaces clashing tools, so every drawn call builds on a class the lab
        # accepted; should one not, the search stops here with the scenario named
        raise RuntimeError(f"{scenario.name} could not be built on {agent.label}")
    result = results[0]
    outcome = result.outcome
    return Verdict(
        contracts_broken(outcome),
        tuple(outcome.reasons),
        result.wall_seconds,
        result.virtual_seconds,
    )
