"""The race fuzzer: seeded random calls, judged by the lab's contracts, failures shrunk.

``resilient-agent lab --fuzz N --seed S`` runs the calls ``generate(S, 0) ... generate(S, N-1)``
(see :mod:`.fuzz_recipe`) on each agent. Every failing call of an agent under test is shrunk to a
minimal call that still breaks the same contract (fewer utterances, no typed text or VAD fault,
rounder times, shorter tool work) and printed as a complete snippet to paste (its imports, the
``Scenario`` and a run of it). A reference agent's failures are printed as expected and do not
decide the exit code. Everything runs on virtual time, so a run is a pure function of the seed:
its JSON is byte-identical every time.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .fuzz_own_tools import OwnToolCall, OwnTools, draw_own_tool_call
from .fuzz_recipe import CallRecipe, generate
from .run import AgentUnderTest
from .search import (
    AT_WAIT_BOUND,
    CONTRACTS,
    Here,
    JudgePool,
    SearchReport,
    Verdict,
    contracts_broken,
    descend,
    judge,
    run_search_command,
    search_exit_code,
    write_search_json,
)
from .search.summary import print_search_summary

__all__ = [
    "AT_WAIT_BOUND",
    "CONTRACTS",
    "FuzzCall",
    "FuzzReport",
    "contracts_broken",
    "run_fuzz",
    "shrink",
    "write_fuzz_json",
]

# Shrinking stops after this many trial runs per failure.
_SHRINK_BUDGET = 40
# Failures shrunk per agent under test and contract (the rest are listed, not shrunk).
_SHRINK_PER_CONTRACT = 3


@dataclass(frozen=True)
class FuzzCall:
    """One fuzzed call on one agent.

    Attributes:
        index: Its index in the run.
        recipe: The call.
        contracts: The contracts it broke (empty when it passed).
        reasons: The broken-contract lines.
        shrunk: For a failure of an agent under test, the minimal call that still breaks one
            of the same contracts, with its reasons.
    """

    index: int
    recipe: CallRecipe | OwnToolCall
    contracts: tuple[str, ...]
    reasons: tuple[str, ...]
    shrunk: tuple[CallRecipe, tuple[str, ...]] | None = None

    def as_json(self) -> dict[str, Any]:
        """The JSON record of a failed call."""
        record: dict[str, Any] = {
            "index": self.index,
            "contracts": list(self.contracts),
            "reasons": list(self.reasons),
            "scenario": self.recipe.source(),
        }
        if self.shrunk is not None:
            recipe, reasons = self.shrunk
            record["shrunk"] = {"scenario": recipe.source(), "reasons": list(reasons)}
        return record


@dataclass
class FuzzReport(SearchReport[FuzzCall]):
    """A fuzz run on one agent (see :class:`~.search.SearchReport`).

    Attributes:
        at_wait_bound: Calls whose only finding is a protected speech played over a caller
            who kept talking past WaitForCaller's bound (a policy, not a failure).
    """

    at_wait_bound: list[int] = field(default_factory=list)

    def by_contract(self) -> Counter[str]:
        """Failed calls per broken contract (a call may break several)."""
        return Counter(name for call in self.failures for name in call.contracts)

    def as_json(self) -> dict[str, Any]:
        """The JSON record of this agent's run (no wall time: it is deterministic)."""
        return {
            "agent": self.agent.path,
            "calls": self.calls,
            "failed": len(self.failures),
            "failures_by_contract": dict(sorted(self.by_contract().items())),
            "talk_over_at_wait_bound": self.at_wait_bound,
            "failures": [f.as_json() for f in self.failures],
        }


def _judge_drawn(job: tuple[int, int, AgentUnderTest]) -> Verdict:
    """In a worker: judge the call drawn again from its seed and index."""
    seed, index, agent = job
    return judge(generate(seed, index).scenario(), agent)


def run_fuzz(
    count: int,
    seed: int,
    agents: Sequence[AgentUnderTest],
    *,
    on_call: Callable[[AgentUnderTest, FuzzCall], None] | None = None,
    shrink_failures: bool = True,
    jobs: int = 1,
    own: OwnTools | None = None,
) -> list[FuzzReport]:
    """Run ``count`` fuzzed calls of ``seed`` on every agent.

    The failures of agents under test are shrunk (not those of reference agents, which are
    expected to fail). With ``jobs`` above 1, that many worker processes judge the calls (the
    agents' classes must be importable by their ``module:Class`` path); the report is the same.
    With ``own`` (the app's tools, probed), about half the calls fall on those tools
    (:mod:`.fuzz_own_tools`); they are printed as they are, two utterances being already small.
    """
    own_calls: dict[int, OwnToolCall] = {}
    if own is not None:
        drawn = ((index, draw_own_tool_call(seed, index, own)) for index in range(count))
        own_calls = {index: call for index, call in drawn if call is not None}
    reports = []
    with JudgePool(jobs) as pool:
        for agent in agents:
            work = [
                (seed, index, agent)
                if index not in own_calls
                else Here(functools.partial(judge, own_calls[index].scenario(), agent))
                for index in range(count)
            ]
            verdicts = pool.verdicts(work, _judge_drawn, chunksize=4)
            report = FuzzReport(agent)
            shrunk_per_contract: Counter[str] = Counter()
            for index, verdict in enumerate(verdicts):
                recipe: CallRecipe | OwnToolCall = own_calls.get(index) or generate(seed, index)
                report.count(verdict)
                call = FuzzCall(index, recipe, verdict.contracts, verdict.reasons)
                broken = verdict.contracts
                if broken == (AT_WAIT_BOUND,):
                    report.at_wait_bound.append(index)
                elif broken:
                    wanted = (
                        shrink_failures and not agent.reference and isinstance(recipe, CallRecipe)
                    )
                    # a speech played at WaitForCaller's bound is a policy: never what to shrink to
                    failed = set(broken) - {AT_WAIT_BOUND}
                    if wanted and any(
                        shrunk_per_contract[c] < _SHRINK_PER_CONTRACT for c in failed
                    ):
                        shrunk_per_contract.update(failed)
                        assert isinstance(recipe, CallRecipe)
                        call = dataclasses.replace(call, shrunk=shrink(recipe, agent, failed))
                    report.failures.append(call)
                if on_call is not None:
                    on_call(agent, call)
            reports.append(report)
    return reports


# -- shrinking ---------------------------------------------------------------------------------


def shrink(
    recipe: CallRecipe, agent: AgentUnderTest, contracts: set[str]
) -> tuple[CallRecipe, tuple[str, ...]]:
    """The smallest call found that still breaks one of ``contracts`` on ``agent``.

    Greedy (:func:`~.search.descend`): tries each simplification in turn and keeps the first
    that still fails, until none does or the trial budget is spent.
    """

    def fails(candidate: CallRecipe) -> Verdict | None:
        verdict = judge(candidate.scenario(), agent)
        return verdict if verdict.breaks_any(contracts) else None

    best, verdict = descend(recipe, _simpler, fails, budget=_SHRINK_BUDGET)
    if verdict is None:
        verdict = judge(best.scenario(), agent)
    return dataclasses.replace(best, name=best.name + "-shrunk"), verdict.reasons


def _simpler(recipe: CallRecipe) -> Iterator[CallRecipe]:
    """Simpler variants of ``recipe``, the biggest simplifications first."""
    for index in range(len(recipe.utterances) - 1, 0, -1):
        yield _without_utterance(recipe, index)
    if recipe.typed:
        yield dataclasses.replace(recipe, typed=()).fitted()
    if recipe.vad_fault.mode != "healthy":
        healthy = dataclasses.replace(recipe.vad_fault, mode="healthy")
        yield dataclasses.replace(recipe, vad_fault=healthy)
    for name, value in recipe.agent_kwargs:
        if isinstance(value, float):
            for shorter in _rounder(value, smaller=True):
                yield _with_kwarg(recipe, name, shorter)
    for index in range(len(recipe.utterances)):
        for attribute in ("start", "end"):
            yield from _with_rounder_time(recipe, index, attribute)


def _rounder(value: float, *, smaller: bool) -> list[float]:
    """Rounder values near ``value``: whole seconds, halves, tenths (shorter ones if asked)."""
    found = []
    for step in (1.0, 0.5, 0.1):
        candidates = [round(value / step) * step]
        if smaller:
            candidates.insert(0, max(step, (value // step) * step))
        for c in candidates:
            c = round(c, 2)
            if c != value and c > 0 and (not smaller or c <= value) and c not in found:
                found.append(c)
    return found


def _without_utterance(recipe: CallRecipe, index: int) -> CallRecipe:
    utterances = recipe.utterances[:index] + recipe.utterances[index + 1 :]
    fault = recipe.vad_fault
    if fault.mode != "healthy":
        if fault.utterance == index:
            fault = dataclasses.replace(fault, mode="healthy", utterance=0)
        elif fault.utterance > index:
            fault = dataclasses.replace(fault, utterance=fault.utterance - 1)
    return dataclasses.replace(recipe, utterances=utterances, vad_fault=fault).fitted()


def _with_kwarg(recipe: CallRecipe, name: str, value: float) -> CallRecipe:
    kwargs = tuple((k, value if k == name else v) for k, v in recipe.agent_kwargs)
    return dataclasses.replace(recipe, agent_kwargs=kwargs).fitted()


def _with_rounder_time(recipe: CallRecipe, index: int, attribute: str) -> Iterator[CallRecipe]:
    utterances = list(recipe.utterances)
    current = utterances[index]
    value = getattr(current, attribute)
    for rounder in _rounder(value, smaller=False):
        if abs(rounder - value) > 0.3:
            continue
        try:
            if attribute == "start":
                utterances[index] = dataclasses.replace(current, start=rounder)
            else:
                utterances[index] = dataclasses.replace(current, end=rounder)
            candidate = dataclasses.replace(recipe, utterances=tuple(utterances)).fitted()
            candidate.scenario()  # overlapping or empty utterances are not a call
        except ValueError:
            continue
        yield candidate


# -- reporting ---------------------------------------------------------------------------------


_REFERENCE_FAIL = "FAIL (reference, expected)"
"""How a reference agent's failed call is shown: the reference exists to show each race."""


def print_fuzz_line(agent: AgentUnderTest, call: FuzzCall, out: TextIO) -> None:
    """One block per failed call, with its shrunk scenario when there is one.

    A reference agent's failures are labelled as expected: they do not decide the exit code.
    """
    if not call.contracts:
        return
    if call.contracts == (AT_WAIT_BOUND,):
        verdict = "NOTE (reference)" if agent.reference else "NOTE"
    else:
        verdict = _REFERENCE_FAIL if agent.reference else "FAIL"
    print(
        f"{verdict}  {call.recipe.name:<18} {agent.label:<16} {', '.join(call.contracts)}", file=out
    )
    for reason in call.reasons:
        print(f"        - {reason}", file=out)
    if isinstance(call.recipe, OwnToolCall) and not agent.reference:
        print("      to run it again (ready to paste, from the app's directory):", file=out)
        for line in call.recipe.source().splitlines():
            print(f"        {line}" if line else "", file=out)
    if call.shrunk is not None:
        recipe, reasons = call.shrunk
        # the app code subclasses the class itself, unless the lab adapts an app's own class
        run_on = agent.path if agent.catalog_cls in (None, agent.cls) else None
        print("      shrunk to (ready to paste: imports, the scenario, and a run):", file=out)
        lines = recipe.snippet(run_on).splitlines()
        if run_on is None:
            lines.append(
                f"# the lab ran it on its adapter of {agent.path}, whose constructor takes no "
                "instructions= (see docs/lab.md)"
            )
        lines += [f"# {reason}" for reason in reasons]
        for line in lines:
            print(f"        {line}" if line else "", file=out)


def print_fuzz_summary(reports: Sequence[FuzzReport], out: TextIO) -> None:
    """Calls, failures by contract and time, per agent; then what decides the exit code."""
    under_test = [r for r in reports if not r.agent.reference]
    last_line = None
    if under_test:
        failed = sum(len(r.failures) for r in under_test)
        labels = ", ".join(r.agent.label for r in under_test)
        last_line = (
            f"exit code {fuzz_exit_code(reports)}: {failed} failed call(s) on the agent(s) under "
            f"test ({labels})"
        )
    print_search_summary(reports, out, _agent_lines, last_line)


def _agent_lines(report: FuzzReport) -> Iterator[str]:
    failed = len(report.failures)
    share = 100.0 * failed / report.calls if report.calls else 0.0
    expected = ""
    if report.agent.reference:
        expected = "; a reference: failures expected, not counted in the exit code"
    yield (
        f"{report.agent.label} ({report.agent.path}, {report.role}): {report.calls} calls, "
        f"{failed} failed ({share:.1f}%{expected}), {report.virtual_seconds:.0f}s of call "
        f"time in {report.wall_seconds:.1f}s"
    )
    counts = report.by_contract()
    for name in [n for n, _ in CONTRACTS] + [AT_WAIT_BOUND, "other"]:
        if counts[name]:
            yield f"    {name:<20} {counts[name]}"
    if report.at_wait_bound:
        yield (
            f"    (not failures: {len(report.at_wait_bound)} call(s) where a protected speech "
            "played over a caller who kept talking past WaitForCaller's bound)"
        )


def fuzz_exit_code(reports: Sequence[FuzzReport]) -> int:
    """0 when no agent under test failed a call (references are expected to fail)."""
    return search_exit_code(reports)


def write_fuzz_json(reports: Sequence[FuzzReport], seed: int, path: Path) -> None:
    """Write the run as JSON: byte-identical for the same seed, count and agents."""
    write_search_json({"seed": seed, "agents": [r.as_json() for r in reports]}, path)


def run_fuzz_command(
    count: int,
    seed: int,
    agents: Sequence[AgentUnderTest],
    json_path: Path | None,
    out: TextIO,
    *,
    jobs: int = 1,
    quiet: bool = False,
    own: OwnTools | None = None,
) -> int:
    """What ``resilient-agent lab --fuzz N --seed S [--jobs J]`` does; returns the exit code.

    The header says which agents are the reference; ``quiet`` prints only the summary.
    """

    def show(agent: AgentUnderTest, call: FuzzCall) -> None:
        if not quiet:
            print_fuzz_line(agent, call, out)
            out.flush()

    return run_search_command(
        agents,
        out,
        lambda: run_fuzz(count, seed, agents, on_call=show, jobs=jobs, own=own),
        print_fuzz_summary,
        json_path,
        lambda reports, path: write_fuzz_json(reports, seed, path),
        wall_time=True,
    )
