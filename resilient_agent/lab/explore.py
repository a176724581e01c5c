"""Schedule exploration: each scenario under many seeded delivery schedules, failures shrunk.

``resilient-agent lab --explore N --seed S`` runs every selected scenario under N schedules
(:class:`~resilient_agent.testing.schedule.Schedule`): the same call, with some deliveries of
the caller's audio, the VAD, the STT, the LLM, the TTS or a realtime model made late by up to a
few milliseconds, enough to reorder them among what is ready at the same instant or move them
across a frame. Each call is judged by the catalog's contracts. A failing schedule of an agent
under test is shrunk to the fewest late deliveries that still break the same contract, and
printed with the ``--schedule`` token that replays it exactly. Everything runs on virtual time: a
schedule's call is a pure function of the scenario, the agent and the token.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import shlex
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ..testing import Scenario
from ..testing.schedule import Delivery, Schedule, explored
from .catalog import scenarios as catalog_scenarios
from .run import AgentUnderTest
from .search import (
    Here,
    JudgePool,
    SearchReport,
    Verdict,
    judge,
    run_search_command,
    shrink_parts,
    write_search_json,
)
from .search.summary import print_search_summary

__all__ = [
    "JITTER_SLACK_S",
    "ExploreReport",
    "ExploredFailure",
    "judge_scheduled",
    "run_explore",
    "run_explore_command",
    "schedule_for",
    "shrink_schedule",
    "with_jitter_slack",
]

# A reply waits on a handful of deliveries (the caller's last frame, the VAD's end of speech,
# the STT's final, the LLM's first token and tool call, the TTS's first audio: 0.3 s at most
# together), and a late one can move an event across an instant where livekit or the library
# changes course (a protected speech ends before a turn delay runs out), which costs up to one
# end-of-turn wait (livekit's 0.5 s and the TurnKeeper's grace). The reply bounds grow by that
# much under a schedule: the explorer hunts words lost, unanswered, answered twice or talked
# over, stuck states and wrong hang-ups; the catalog's own bounds judge latency.
JITTER_SLACK_S = 1.1
# Trial runs spent shrinking one failing schedule.
_SHRINK_BUDGET = 160
# Failing schedules shrunk per scenario and agent (the rest are listed with their full token).
_SHRINK_PER_SCENARIO = 1


def schedule_for(seed: int, scenario: str, index: int) -> Schedule:
    """The ``index``-th schedule the explorer draws for ``scenario`` under ``seed``."""
    digest = hashlib.sha256(f"{seed}/{scenario}/{index}".encode()).digest()
    return Schedule(int.from_bytes(digest[:6], "big"))


def with_jitter_slack(scenario: Scenario) -> Scenario:
    """``scenario`` with every reply bound :data:`JITTER_SLACK_S` longer."""
    return dataclasses.replace(
        scenario,
        reply_bound=scenario.reply_bound + JITTER_SLACK_S,
        utterances=tuple(
            u
            if u.reply_within is None
            else dataclasses.replace(u, reply_within=u.reply_within + JITTER_SLACK_S)
            for u in scenario.utterances
        ),
        typed=tuple(
            t
            if t.reply_within is None
            else dataclasses.replace(t, reply_within=t.reply_within + JITTER_SLACK_S)
            for t in scenario.typed
        ),
    )


@dataclass(frozen=True)
class ExploredFailure:
    """A schedule under which an agent broke a contract.

    Attributes:
        scenario: The scenario's name.
        agent: The agent's ``module:Class``.
        schedule: The schedule as drawn.
        contracts: The contracts it broke (see :data:`~resilient_agent.lab.search.CONTRACTS`).
        reasons: Why, as the contracts say it.
        late: How many deliveries the schedule made late.
        shrunk: The fewest late deliveries found that still break one of ``contracts``, or None
            when not shrunk.
        shrunk_late: Those deliveries with their lateness in seconds.
        shrunk_reasons: The shrunk schedule's broken contracts, as they read.
        without_schedule: The call fails on the lab's own timing too (nothing to shrink).
    """

    scenario: str
    agent: str
    schedule: Schedule
    contracts: tuple[str, ...]
    reasons: tuple[str, ...]
    late: int
    shrunk: Schedule | None = None
    shrunk_late: tuple[tuple[Delivery, float], ...] = ()
    shrunk_reasons: tuple[str, ...] = ()
    without_schedule: bool = False

    def replay_command(self) -> str:
        """The command that replays the (shrunk) failing call exactly."""
        token = (self.shrunk or self.schedule).token()
        return (
            f"resilient-agent lab --only {shlex.quote('^' + self.scenario + '$')} "
            f"--agent {self.agent} --schedule {token}"
        )

    def as_json(self) -> dict[str, Any]:
        """The record ``--json`` writes."""
        return {
            "scenario": self.scenario,
            "agent": self.agent,
            "schedule": self.schedule.token(),
            "contracts": list(self.contracts),
            "reasons": list(self.reasons),
            "late_deliveries": self.late,
            "without_schedule": self.without_schedule,
            "shrunk": self.shrunk.token() if self.shrunk is not None else None,
            "shrunk_late": [
                {"source": source, "index": index, "late_s": round(late, 6)}
                for (source, index), late in self.shrunk_late
            ],
            "shrunk_reasons": list(self.shrunk_reasons),
            "replay": self.replay_command(),
        }


@dataclass
class ExploreReport(SearchReport[ExploredFailure]):
    """What the explorer found on one agent (see :class:`~.search.SearchReport`).

    Attributes:
        scenarios: Scenarios explored.
    """

    scenarios: int = 0

    @property
    def schedules(self) -> int:
        """Schedules run (scenarios times schedules per scenario)."""
        return self.calls

    def failed_scenarios(self) -> list[str]:
        """The scenarios with at least one failing schedule, in the order run."""
        return list(dict.fromkeys(f.scenario for f in self.failures))

    def as_json(self) -> dict[str, Any]:
        """The record ``--json`` writes for this agent."""
        return {
            "agent": self.agent.path,
            "reference": self.agent.reference,
            "scenarios": self.scenarios,
            "schedules": self.schedules,
            "failed": len(self.failures),
            "failed_scenarios": self.failed_scenarios(),
            "failures": [f.as_json() for f in self.failures],
        }


def judge_scheduled(
    scenario: Scenario, agent: AgentUnderTest, schedule: Schedule | None
) -> Verdict:
    """Judge ``scenario`` on ``agent`` under ``schedule``, its reply bounds given the slack.

    The verdict records the deliveries the schedule made late.
    """
    with explored(schedule) as exploration:
        verdict = judge(with_jitter_slack(scenario), agent)
    late = tuple(exploration.late) if exploration is not None else ()
    return dataclasses.replace(verdict, late=late)


_CATALOG: dict[str, Scenario] = {}


def _catalog() -> dict[str, Scenario]:
    """The catalog's scenarios by name, built once per process."""
    if not _CATALOG:
        _CATALOG.update((s.name, s) for s in catalog_scenarios())
    return _CATALOG


def _judge_named(job: tuple[str, AgentUnderTest, int]) -> Verdict:
    """In a worker: judge a catalog scenario, named, under a schedule's seed."""
    name, agent, seed = job
    return judge_scheduled(_catalog()[name], agent, Schedule(seed))


def shrink_schedule(
    scenario: Scenario,
    agent: AgentUnderTest,
    schedule: Schedule,
    late: Sequence[tuple[Delivery, float]],
    contracts: set[str],
) -> tuple[Schedule | None, tuple[tuple[Delivery, float], ...], tuple[str, ...]]:
    """The fewest of ``late`` found that still break one of ``contracts`` (delta debugging).

    The parts are the late deliveries; a part set is the schedule that keeps only those late.

    Returns:
        The shrunk schedule, its late deliveries and reasons; a None schedule when the call
        fails without any late delivery (the failure is not the schedule's).
    """

    def fails(keep: Sequence[Delivery]) -> Verdict | None:
        verdict = judge_scheduled(
            scenario, agent, dataclasses.replace(schedule, keep=frozenset(keep))
        )
        return verdict if verdict.breaks_any(contracts) else None

    if fails([]) is not None:
        return None, (), ()
    keys = [key for key, _ in late]
    best = fails(keys)
    if best is None:
        # the whole schedule, restricted to its own late deliveries, no longer fails: keep it
        return schedule, tuple(late), ()
    # an ordering bug usually lies between two sources, or within one: each source alone first
    kept_keys, shrunk = shrink_parts(
        keys, fails, budget=_SHRINK_BUDGET, group=lambda key: key[0], spent=2
    )
    best = shrunk or best
    lateness = dict(late)
    kept = tuple((key, lateness[key]) for key in kept_keys)
    return dataclasses.replace(schedule, keep=frozenset(kept_keys)), kept, best.reasons


def run_explore(
    chosen: Sequence[Scenario],
    agents: Sequence[AgentUnderTest],
    count: int,
    seed: int,
    *,
    jobs: int = 1,
    on_failure: Callable[[ExploredFailure], None] | None = None,
    on_scenario: Callable[[AgentUnderTest, Scenario, int], None] | None = None,
) -> list[ExploreReport]:
    """Run each of ``chosen`` under ``count`` schedules of ``seed`` on every agent.

    Failures of agents under test are shrunk (one per scenario); a reference agent's are
    listed as they are, its races being expected. With ``jobs`` above 1, worker processes
    judge the catalog's scenarios (the report is the same).
    """
    reports = []
    with JudgePool(jobs) as pool:
        for agent in agents:
            report = ExploreReport(agent)
            for scenario in chosen:
                report.scenarios += 1
                schedules = [schedule_for(seed, scenario.name, i) for i in range(count)]
                work = [
                    (scenario.name, agent, s.seed)
                    if scenario.name in _catalog()
                    # the app's own tool scenarios carry its mocks, which a worker cannot be sent
                    else Here(functools.partial(judge_scheduled, scenario, agent, s))
                    for s in schedules
                ]
                verdicts = pool.verdicts(work, _judge_named, chunksize=2)
                shrunk = 0
                failed = 0
                for schedule, verdict in zip(schedules, verdicts, strict=True):
                    report.count(verdict)
                    if not verdict.contracts:
                        continue
                    failed += 1
                    failure = ExploredFailure(
                        scenario.name,
                        agent.path,
                        schedule,
                        verdict.contracts,
                        verdict.reasons,
                        len(verdict.late),
                    )
                    if not agent.reference and shrunk < _SHRINK_PER_SCENARIO:
                        shrunk += 1
                        failure = _shrunk(failure, scenario, agent, verdict)
                    report.failures.append(failure)
                    if on_failure is not None and not agent.reference:
                        on_failure(failure)
                if on_scenario is not None:
                    on_scenario(agent, scenario, failed)
            reports.append(report)
    return reports


def _shrunk(
    failure: ExploredFailure, scenario: Scenario, agent: AgentUnderTest, verdict: Verdict
) -> ExploredFailure:
    schedule, kept, reasons = shrink_schedule(
        scenario, agent, failure.schedule, verdict.late, set(verdict.contracts)
    )
    if schedule is None:
        return dataclasses.replace(failure, without_schedule=True)
    return dataclasses.replace(failure, shrunk=schedule, shrunk_late=kept, shrunk_reasons=reasons)


# -- the command -------------------------------------------------------------------------------


def print_failure(failure: ExploredFailure, out: TextIO) -> None:
    """One failing schedule: its verdict and, once shrunk, the deliveries and the replay."""
    print(
        f"FAIL  {failure.scenario:<52} {failure.agent.rsplit(':', 1)[-1]:<16} "
        f"schedule {failure.schedule.seed} ({failure.late} late): {'; '.join(failure.reasons)}",
        file=out,
    )
    if failure.without_schedule:
        print("      fails on the lab's own timing too: not the schedule's failure", file=out)
    elif failure.shrunk is not None:
        deliveries = ", ".join(
            f"{source}#{index} +{late * 1000:.3f} ms"
            for (source, index), late in failure.shrunk_late
        )
        print(f"      shrunk to {len(failure.shrunk_late)} late: {deliveries}", file=out)
        if failure.shrunk_reasons:
            print(f"      which breaks: {'; '.join(failure.shrunk_reasons)}", file=out)
        print(f"      replay: {failure.replay_command()}", file=out)


def print_explore_summary(reports: Sequence[ExploreReport], out: TextIO) -> None:
    """Per agent: schedules run and failed; then the line for the agents under test."""
    tested = [r for r in reports if not r.agent.reference]
    schedules = sum(r.schedules for r in tested)
    scenarios = max((r.scenarios for r in tested), default=0)
    failures = sum(len(r.failures) for r in tested)
    last_line = f"explored {schedules} schedules of {scenarios} scenarios: {failures} failed"
    print_search_summary(reports, out, _agent_lines, last_line)


def _agent_lines(report: ExploreReport) -> Iterator[str]:
    yield (
        f"{report.agent.label:<16} ({report.role}): {report.schedules} schedules of "
        f"{report.scenarios} scenarios, {len(report.failures)} failed "
        f"({len(report.failed_scenarios())} scenarios), {report.wall_seconds:.1f}s of calls"
    )


def write_explore_json(reports: Sequence[ExploreReport], count: int, seed: int, path: Path) -> None:
    """Write the exploration's reports to ``path``: byte-identical for the same arguments."""
    record = {
        "seed": seed,
        "schedules_per_scenario": count,
        "agents": [r.as_json() for r in reports],
    }
    write_search_json(record, path, sort_keys=True)


def run_explore_command(
    chosen: Sequence[Scenario],
    agents: Sequence[AgentUnderTest],
    count: int,
    seed: int,
    json_path: Path | None,
    out: TextIO,
    *,
    jobs: int = 1,
    quiet: bool = False,
) -> int:
    """Run ``--explore``: print failures as they come, the summary, the JSON; the exit code."""

    def show(failure: ExploredFailure) -> None:
        print_failure(failure, out)
        out.flush()

    def progress(agent: AgentUnderTest, scenario: Scenario, failed: int) -> None:
        if not quiet:
            verdict = "ok" if not failed else f"{failed} failed"
            if failed and agent.reference:
                verdict += " (a reference: its races are expected)"
            print(f"      {scenario.name:<52} {agent.label:<16} {count} schedules: {verdict}")
            out.flush()

    return run_search_command(
        agents,
        out,
        lambda: run_explore(
            chosen, agents, count, seed, jobs=jobs, on_failure=show, on_scenario=progress
        ),
        print_explore_summary,
        json_path,
        lambda reports, path: write_explore_json(reports, count, seed, path),
        intro=f"exploring {len(chosen)} scenario(s) under {count} schedule(s) each, seed {seed}",
    )
