"""A search's report per agent, its summary, exit code and JSON, and the command around it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TextIO, TypeVar

from ..results import print_header
from ..run import AgentUnderTest
from .verdict import Verdict

__all__ = [
    "SearchReport",
    "print_search_summary",
    "run_search_command",
    "search_exit_code",
    "write_search_json",
]

F = TypeVar("F")
R = TypeVar("R", bound="SearchReport[Any]")


@dataclass
class SearchReport(Generic[F]):
    """What a search found on one agent.

    Attributes:
        agent: The agent.
        calls: Calls judged.
        failures: The failing calls, in the order judged.
        wall_seconds: Real seconds the calls took (printed, never written to the JSON).
        virtual_seconds: Call seconds simulated.
    """

    agent: AgentUnderTest
    calls: int = 0
    failures: list[F] = field(default_factory=list)
    wall_seconds: float = 0.0
    virtual_seconds: float = 0.0

    @property
    def role(self) -> str:
        """``reference`` (its failures are expected) or ``under test``."""
        return "reference" if self.agent.reference else "under test"

    def count(self, verdict: Verdict) -> None:
        """Count one judged call."""
        self.calls += 1
        self.wall_seconds += verdict.wall_seconds
        self.virtual_seconds += verdict.virtual_seconds


def search_exit_code(reports: Sequence[SearchReport[Any]]) -> int:
    """0 when no agent under test failed a call (references are expected to fail), else 1."""
    return 1 if any(r.failures for r in reports if not r.agent.reference) else 0


def print_search_summary(
    reports: Sequence[R],
    out: TextIO,
    agent_lines: Callable[[R], Iterable[str]],
    last_line: str | None,
) -> None:
    """A blank line, each agent's lines, then the line about the agents under test."""
    print("", file=out)
    for report in reports:
        for line in agent_lines(report):
            print(line, file=out)
    if last_line is not None:
        print(last_line, file=out)


def write_search_json(payload: dict[str, Any], path: Path, *, sort_keys: bool = False) -> None:
    """Write a search's record: byte-identical for the same arguments (no wall time in it)."""
    path.write_text(json.dumps(payload, indent=2, sort_keys=sort_keys) + "\n", encoding="utf-8")


def run_search_command(
    agents: Sequence[AgentUnderTest],
    out: TextIO,
    search: Callable[[], Sequence[R]],
    summary: Callable[[Sequence[R], TextIO], None],
    json_path: Path | None,
    write_json: Callable[[Sequence[R], Path], None],
    *,
    intro: str | None = None,
    wall_time: bool = False,
) -> int:
    """The header, the search, its summary and JSON; returns the exit code.

    Args:
        agents: The agents searched (the header says which are the reference).
        out: Where the text goes.
        search: Runs the search, printing its findings as they come.
        summary: Prints the reports' summary.
        json_path: Where ``--json`` asked for the record, if it did.
        write_json: Writes the record.
        intro: A line said before the search starts.
        wall_time: Whether to end the summary with the real seconds taken.
    """
    started = time.perf_counter()
    print_header(agents, out)
    if intro is not None:
        print(intro, file=out, flush=True)
    reports = search()
    summary(reports, out)
    if wall_time:
        print(f"wall time: {time.perf_counter() - started:.1f}s", file=out)
    if json_path is not None:
        write_json(reports, json_path)
        print(f"results written to {json_path}", file=out)
    return search_exit_code(reports)
