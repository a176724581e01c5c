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

from ..testing import Scenario
from ..testing.schedule import Delivery, Schedule
from .explore import judge_scheduled, schedule_for, shrink_schedule
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
        schedule: With ``--explore M``, the delivery schedule the call was judged under.
        late: How many deliveries that schedule made late.
        shrunk_schedule: The fewest of those late deliveries found that the shrunk call still
            needs to fail; None when it fails on the lab's own timing too.
        shrunk_late: Those deliveries, with their lateness in seconds.
    """

    index: int
    recipe: CallRecipe | OwnToolCall
    contracts: tuple[str, ...]
    reasons: tuple[str, ...]
    shrunk: tuple[CallRecipe, tuple[str, ...]] | None = None
    schedule: Schedule | None = None
    late: int = 0
    shrunk_schedule: Schedule | None = None
    shrunk_late: tuple[tuple[Delivery, float], ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The JSON record of a failed call."""
        record: dict[str, Any] = {
            "index": self.index,
            "contracts": list(self.contracts),
            "reasons": list(self.reasons),
            "scenario": self.recipe.source(),
        }
        if self.schedule is not None:
            record["schedule"] = self.schedule.token()
            record["late_deliveries"] = self.late
        if self.shrunk is not None:
            recipe, reasons = self.shrunk
            record["shrunk"] = {"scenario": recipe.source(), "reasons": list(reasons)}
            if self.schedule is not None:
                shrunk = self.shrunk_schedule
                record["shrunk"]["schedule"] = shrunk.token() if shrunk is not None else None
                record["shrunk"]["late"] = [
                    {"source": source, "index": index, "late_s": round(late, 6)}
                    for (source, index), late in self.shrunk_late
                ]
        return record


@dataclass
class FuzzReport(SearchReport[FuzzCall]):
    """A fuzz run on one agent (see :class:`~.search.SearchReport`).

    Attributes:
        at_wait_bound: Calls whose only finding is a protected speech played over a caller
            who kept talking past WaitForCaller's bound (a policy, not a failure).
        schedules: With ``--explore M``, the delivery schedules each drawn call ran under
            (``calls`` counts every call judged: drawn calls times schedules); 0 without.
    """

    at_wait_bound: list[int] = field(default_factory=list)
    schedules: int = 0

    @property
    def drawn(self) -> int:
        """Calls drawn (each judged once per schedule)."""
        return self.calls // self.schedules if self.schedules else self.calls

    def by_contract(self) -> Counter[str]:
        """Failed calls per broken contract (a call may break several)."""
        return Counter(name for call in self.failures for name in call.contracts)

    def as_json(self) -> dict[str, Any]:
        """The JSON record of this agent's run (no wall time: it is deterministic)."""
        record: dict[str, Any] = {"agent": self.agent.path, "calls": self.drawn}
        if self.schedules:
            record["schedules_per_call"] = self.schedules
            record["schedules"] = self.calls
        return record | {
            "failed": len(self.failures),
            "failures_by_contract": dict(sorted(self.by_contract().items())),
            "talk_over_at_wait_bound": self.at_wait_bound,
            "failures": [f.as_json() for f in self.failures],
        }


def _judge_drawn(job: tuple[int, int, AgentUnderTest, int | None]) -> Verdict:
    """In a worker: judge the call drawn again from its seed and index, under its schedule."""
    seed, index, agent, schedule = job
    return _judge_under(generate(seed, index).scenario(), agent, schedule)


def _judge_under(scenario: Scenario, agent: AgentUnderTest, schedule: int | None) -> Verdict:
    """The lab's own timing without a schedule (bounds as written), else the explorer's."""
    if schedule is None:
        return judge(scenario, agent)
    return judge_scheduled(scenario, agent, Schedule(schedule))


def run_fuzz(
    count: int,
    seed: int,
    agents: Sequence[AgentUnderTest],
    *,
    on_call: Callable[[AgentUnderTest, FuzzCall], None] | None = None,
    shrink_failures: bool = True,
    jobs: int = 1,
    own: OwnTools | None = None,
    schedules: int = 0,
) -> list[FuzzReport]:
    """Run ``count`` fuzzed calls of ``seed`` on every agent.

    The failures of agents under test are shrunk (not those of reference agents, which are
    expected to fail). With ``jobs`` above 1, that many worker processes judge the calls (the
    agents' classes must be importable by their ``module:Class`` path); the report is the same.
    With ``own`` (the app's tools, probed), about half the calls fall on those tools
    (:mod:`.fuzz_own_tools`); they are printed as they are, two utterances being already small.
    With ``schedules`` (``--explore M``), each call runs under that many delivery schedules
    the explorer draws for it (:func:`~.explore.schedule_for` of its name) instead of once on the
    lab's own timing, and a failure is shrunk over both the call and the schedule
    (:func:`shrink_scheduled`).
    """
    own_calls: dict[int, OwnToolCall] = {}
    if own is not None:
        drawn = ((index, draw_own_tool_call(seed, index, own)) for index in range(count))
        own_calls = {index: call for index, call in drawn if call is not None}
    runs: list[tuple[int, Schedule | None]] = [
        (index, schedule_for(seed, f"fuzz/{seed}-{index}", drawn) if schedules else None)
        for index in range(count)
        for drawn in range(max(schedules, 1))
    ]
    reports = []
    with JudgePool(jobs) as pool:
        for agent in agents:
            work = [
                (seed, index, agent, None if schedule is None else schedule.seed)
                if index not in own_calls
                else Here(
                    functools.partial(
                        _judge_under,
                        own_calls[index].scenario(),
                        agent,
                        None if schedule is None else schedule.seed,
                    )
                )
                for index, schedule in runs
            ]
            verdicts = pool.verdicts(work, _judge_drawn, chunksize=4)
            report = FuzzReport(agent, schedules=schedules)
            shrunk_per_contract: Counter[str] = Counter()
            # a call failing under several schedules is shrunk once: the first failure
            shrunk_calls: set[int] = set()
            for (index, schedule), verdict in zip(runs, verdicts, strict=True):
                recipe: CallRecipe | OwnToolCall = own_calls.get(index) or generate(seed, index)
                report.count(verdict)
                call = FuzzCall(
                    index, recipe, verdict.contracts, verdict.reasons, schedule=schedule
                )
                if schedule is not None:
                    call = dataclasses.replace(call, late=len(verdict.late))
                broken = verdict.contracts
                if broken == (AT_WAIT_BOUND,):
                    report.at_wait_bound.append(index)
                elif broken:
                    wanted = (
                        shrink_failures
                        and not agent.reference
                        and isinstance(recipe, CallRecipe)
                        and index not in shrunk_calls
                    )
                    # a speech played at WaitForCaller's bound is a policy: never what to shrink to
                    failed = set(broken) - {AT_WAIT_BOUND}
                    if wanted and any(
                        shrunk_per_contract[c] < _SHRINK_PER_CONTRACT for c in failed
                    ):
                        shrunk_per_contract.update(failed)
                        shrunk_calls.add(index)
                        assert isinstance(recipe, CallRecipe)
                        if schedule is None:
                            call = dataclasses.replace(call, shrunk=shrink(recipe, agent, failed))
                        else:
                            call = shrink_scheduled(call, recipe, schedule, agent, failed)
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
    best, verdict = _shrink_call(recipe, functools.partial(judge, agent=agent), contracts)
    return best, verdict.reasons


def shrink_scheduled(
    call: FuzzCall,
    recipe: CallRecipe,
    schedule: Schedule,
    agent: AgentUnderTest,
    contracts: set[str],
) -> FuzzCall:
    """``call``, failing under ``schedule``, with the call and the schedule shrunk.

    The call first, under the whole schedule: a delivery's lateness depends only on the
    schedule's seed, its source and its index, so a simpler call keeps the schedule's draws.
    Then the late deliveries the shrunk call still needs, by delta debugging
    (:func:`~.explore.shrink_schedule`). A shrunk call that fails on the lab's own timing too
    keeps no schedule.
    """

    def scheduled(scenario: Scenario) -> Verdict:
        return judge_scheduled(scenario, agent, schedule)

    best, verdict = _shrink_call(recipe, scheduled, contracts)
    kept, late, reasons = shrink_schedule(best.scenario(), agent, schedule, verdict.late, contracts)
    if kept is None:
        reasons = judge(best.scenario(), agent).reasons
    return dataclasses.replace(
        call,
        shrunk=(best, reasons or verdict.reasons),
        shrunk_schedule=kept,
        shrunk_late=late,
    )


def _shrink_call(
    recipe: CallRecipe, judge_call: Callable[[Scenario], Verdict], contracts: set[str]
) -> tuple[CallRecipe, Verdict]:
    """The smallest call found that ``judge_call`` still finds breaking one of ``contracts``."""

    def fails(candidate: CallRecipe) -> Verdict | None:
        verdict = judge_call(candidate.scenario())
        return verdict if verdict.breaks_any(contracts) else None

    best, verdict = descend(recipe, _simpler, fails, budget=_SHRINK_BUDGET)
    if verdict is None:
        verdict = judge_call(best.scenario())
    return dataclasses.replace(best, name=best.name + "-shrunk"), verdict


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
    under = ""
    if call.schedule is not None:
        under = f" under schedule {call.schedule.seed} ({call.late} late)"
    print(
        f"{verdict}  {call.recipe.name:<18} {agent.label:<16} {', '.join(call.contracts)}{under}",
        file=out,
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
        kept = call.shrunk_schedule
        if call.schedule is not None:
            print(f"      {_shrunk_schedule_line(call)}", file=out)
        print("      shrunk to (ready to paste: imports, the scenario, and a run):", file=out)
        lines = recipe.snippet(run_on, kept.token() if kept is not None else None).splitlines()
        if run_on is None:
            lines.append(
                f"# the lab ran it on its adapter of {agent.path}, whose constructor takes no "
                "instructions= (see docs/lab.md)"
            )
        lines += [f"# {reason}" for reason in reasons]
        for line in lines:
            print(f"        {line}" if line else "", file=out)


def _shrunk_schedule_line(call: FuzzCall) -> str:
    """What the shrunk call still needs of its schedule's late deliveries."""
    if call.shrunk_schedule is None:
        return "the shrunk call fails on the lab's own timing too: not the schedule's failure"
    deliveries = ", ".join(
        f"{source}#{index} +{late * 1000:.3f} ms" for (source, index), late in call.shrunk_late
    )
    return f"schedule shrunk to {len(call.shrunk_late)} late: {deliveries}"


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
    calls = f"{report.calls} calls"
    if report.schedules:
        calls = f"{report.drawn} calls under {report.schedules} schedules each ({calls})"
    yield (
        f"{report.agent.label} ({report.agent.path}, {report.role}): {calls}, "
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
    schedules: int = 0,
) -> int:
    """What ``resilient-agent lab --fuzz N [--explore M] --seed S [--jobs J]`` does.

    The header says which agents are the reference; ``quiet`` prints only the summary. Returns
    the exit code.
    """

    def show(agent: AgentUnderTest, call: FuzzCall) -> None:
        if not quiet:
            print_fuzz_line(agent, call, out)
            out.flush()

    return run_search_command(
        agents,
        out,
        lambda: run_fuzz(
            count, seed, agents, on_call=show, jobs=jobs, own=own, schedules=schedules
        ),
        print_fuzz_summary,
        json_path,
        lambda reports, path: write_fuzz_json(reports, seed, path),
        intro=(
            f"fuzzing {count} call(s) under {schedules} schedule(s) each, seed {seed}"
            if schedules
            else None
        ),
        wall_time=True,
    )
