"""Plain-text lines, the summary table and the JSON file of a lab run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from .run import AgentUnderTest, LabResult

__all__ = ["exit_code", "format_line", "print_header", "print_summary", "write_json"]


def _figure(value: float | None, unit: str = "s") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


def print_header(agents: Sequence[AgentUnderTest], out: TextIO) -> None:
    """One line saying which rows are the reference, expected to fail, and which decide."""
    references = [a.label for a in agents if a.reference]
    under_test = [a.label for a in agents if not a.reference]
    if references and under_test:
        print(
            f"{', '.join(references)} rows are the reference (plain livekit.agents.Agent, the "
            f"same app code): they show each race, so FAIL is expected there. "
            f"{', '.join(under_test)} rows are under test and decide the exit code.",
            file=out,
        )
    elif references:
        print(
            f"{', '.join(references)} runs alone as the reference: every race should FAIL "
            "and every control pass.",
            file=out,
        )
    else:
        plain = [a.label for a in agents if not a.reference and not _resilient(a)]
        if plain:
            print(
                f"{', '.join(under_test)} is under test, and is not a ResilientAgent: the races "
                "fail on it as on a plain livekit.agents.Agent, so expect FAIL rows and exit "
                "code 1 (every control should pass).",
                file=out,
            )
        else:
            print(f"{', '.join(under_test)} is under test: every row should pass.", file=out)


def _resilient(agent: AgentUnderTest) -> bool:
    from .. import ResilientAgent

    return issubclass(agent.cls, ResilientAgent)


def format_line(result: LabResult) -> str:
    """One line per call: verdict, scenario, agent and the figures behind the verdict."""
    o = result.outcome
    verdict = "PASS" if o.passed else "FAIL"
    onset = f" @{result.onset:.2f}s" if result.onset is not None else ""
    line = (
        f"{verdict}  {result.scenario.name + onset:<52} {result.agent.label:<16} "
        f"latency={_figure(o.reply_latency_s):>6} lost_words={o.lost_words:<2} "
        f"user_state={o.end_user_state:<9} unfinished={o.unfinished_handles} "
        f"timeouts={o.interruption_timeouts} hung_up={'yes' if o.hung_up else 'no'}"
    )
    if o.reasons:
        line += "\n" + "\n".join(f"        - {reason}" for reason in o.reasons)
    return line


def reference_as_expected(results: Sequence[LabResult]) -> bool:
    """Whether a reference agent shows what the lab claims: controls pass, races reproduce.

    A race reproduces when at least one of its runs (one per onset with ``--sweep``) fails.
    """
    by_scenario: dict[tuple[str, str], list[LabResult]] = {}
    for result in results:
        by_scenario.setdefault((result.scenario.name, result.agent.path), []).append(result)
    for runs in by_scenario.values():
        if runs[0].scenario.control:
            if not all(r.outcome.passed for r in runs):
                return False
        elif all(r.outcome.passed for r in runs):
            return False
    return True


def exit_code(results: Sequence[LabResult], agents: Sequence[AgentUnderTest]) -> int:
    """0 when every contract holds for the agents under test.

    With only reference agents (no ``ResilientAgent`` yet), 0 means the lab works: every race
    reproduces and every control passes.
    """
    under_test = [a for a in agents if not a.reference]
    if under_test:
        paths = {a.path for a in under_test}
        return 0 if all(r.outcome.passed for r in results if r.agent.path in paths) else 1
    return 0 if reference_as_expected(results) else 1


def print_summary(
    results: Sequence[LabResult],
    agents: Sequence[AgentUnderTest],
    out: TextIO,
    skipped: Sequence[tuple[str, str]] = (),
) -> None:
    """The table a newcomer reads: one row per scenario, one column per agent.

    Args:
        results: Every call.
        agents: The agents, one column each.
        out: Where to print.
        skipped: ``(scenario name, agent path)`` of every scenario that could not run on an
            agent: its cell says ``SKIP``, so no row vanishes from the table.
    """
    names: list[str] = []
    for name in [r.scenario.name for r in results] + [name for name, _ in skipped]:
        if name not in names:
            names.append(name)
    width = max([len("scenario")] + [len(n) for n in names]) + 2
    header = f"{'scenario':<{width}}" + "".join(f"{a.label:>18}" for a in agents)
    print("", file=out)
    print(header, file=out)
    print("-" * len(header), file=out)
    for name in names:
        cells = []
        for agent in agents:
            runs = [r for r in results if r.scenario.name == name and r.agent.path == agent.path]
            passed = sum(r.outcome.passed for r in runs)
            if (name, agent.path) in skipped:
                cells.append("SKIP")
            elif len(runs) == 1:
                run = runs[0]
                latency = _figure(run.outcome.reply_latency_s)
                cells.append(f"{'pass' if run.outcome.passed else 'FAIL'} {latency:>7}")
            else:
                cells.append(f"{passed}/{len(runs)} pass")
        control = any(r.scenario.control for r in results if r.scenario.name == name)
        marker = "  (control)" if control else ""
        print(f"{name:<{width}}" + "".join(f"{c:>18}" for c in cells) + marker, file=out)
    print("-" * len(header), file=out)
    _print_own_tools(results, agents, out)
    _print_sweeps(results, agents, out)
    for agent in agents:
        runs = [r for r in results if r.agent.path == agent.path]
        failed = sum(not r.outcome.passed for r in runs)
        role = "reference" if agent.reference else "under test"
        skips = sum(path == agent.path for _, path in skipped)
        not_run = f", {skips} skipped" if skips else ""
        print(
            f"{agent.label} ({agent.path}, {role}): {len(runs) - failed} passed, {failed} failed"
            f"{not_run}",
            file=out,
        )
    wall = sum(r.wall_seconds for r in results)
    virtual = sum(r.virtual_seconds for r in results)
    ratio = virtual / wall if wall else 0.0
    print(
        f"{len(results)} calls, {virtual:.0f}s of call time simulated in {wall:.1f}s "
        f"({ratio:.0f}x real time)",
        file=out,
    )


def _print_own_tools(
    results: Sequence[LabResult], agents: Sequence[AgentUnderTest], out: TextIO
) -> None:
    """One row per tool of the app's own (``app_tool/<tool>/<window>``): every window of it."""
    from .catalog.own_tools import FAMILY

    own = [r for r in results if r.scenario.family == FAMILY]
    if not own:
        return
    print("your tools: the caller spoke in each window of each tool", file=out)
    tools = list(dict.fromkeys(r.scenario.name.split("/")[1] for r in own))
    for tool in tools:
        for agent in agents:
            runs = [
                r
                for r in own
                if r.scenario.name.split("/")[1] == tool and r.agent.path == agent.path
            ]
            failed = [r.scenario.name.split("/")[2] for r in runs if not r.outcome.passed]
            verdict = f"FAIL in {', '.join(failed)}" if failed else "pass"
            passed = len(runs) - len(failed)
            print(
                f"  {tool:<32} {agent.label:<16} {passed}/{len(runs)} windows pass  {verdict}",
                file=out,
            )
    print("", file=out)


def _print_sweeps(
    results: Sequence[LabResult], agents: Sequence[AgentUnderTest], out: TextIO
) -> None:
    swept = [r for r in results if r.onset is not None]
    if not swept:
        return
    print("sweeps: one mark per onset across the race window ('.' pass, 'x' fail)", file=out)
    names = list(dict.fromkeys(r.scenario.name for r in swept))
    for name in names:
        for agent in agents:
            runs = [r for r in swept if r.scenario.name == name and r.agent.path == agent.path]
            if not runs:
                continue
            marks = "".join("." if r.outcome.passed else "x" for r in runs)
            first, last = runs[0].onset, runs[-1].onset
            print(f"  {name:<50} {agent.label:<16} {first:5.2f}s {marks} {last:5.2f}s", file=out)
    print("", file=out)


def write_json(results: Sequence[LabResult], path: Path) -> None:
    """Write ``{"results": [...]}`` as documented for ``--json``."""
    payload = {"results": [r.as_json() for r in results]}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
