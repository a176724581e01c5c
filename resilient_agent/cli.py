"""The ``resilient-agent`` command."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="resilient-agent", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    lab = commands.add_parser(
        "lab",
        help="run the race catalog offline against real AgentSessions",
        description=(
            "Run the race catalog against a plain livekit.agents.Agent and ResilientAgent on "
            "virtual time, print one line per call and a summary table. Exit code 0 only if "
            "every contract holds for the agents under test."
        ),
    )
    lab.add_argument(
        "--agent",
        metavar="MODULE:CLASS",
        help="run only this Agent subclass (under test), e.g. livekit.agents:Agent",
    )
    lab.add_argument("--only", metavar="REGEX", help="run only scenarios whose name matches")
    lab.add_argument(
        "--sweep", action="store_true", help="move the caller's onset across each race window"
    )
    lab.add_argument("--json", metavar="PATH", type=Path, help="write every result as JSON")
    lab.add_argument(
        "--report",
        metavar="PATH",
        type=Path,
        help="write a self-contained HTML report: every call drawn as a timeline",
    )
    lab.add_argument(
        "--timeline",
        metavar="PATH",
        type=Path,
        help="write every call's timeline (states, speech handles, tools, words) as JSON",
    )
    lab.add_argument("--list", action="store_true", help="list the scenarios and exit")
    lab.add_argument(
        "--fuzz",
        metavar="N",
        type=int,
        help="run N seeded random calls instead of the catalog; failures are shrunk",
    )
    lab.add_argument("--seed", metavar="S", type=int, default=0, help="the --fuzz seed")
    lab.add_argument("--quiet", action="store_true", help="print only the summary table")
    return parser


def _lab(args: argparse.Namespace) -> int:
    from .lab.catalog import scenarios
    from .lab.report import exit_code, format_line, print_summary, write_json
    from .lab.run import (
        AgentPathError,
        AgentUnderTest,
        default_agents,
        load_agent_class,
        run_lab,
        select,
    )

    chosen = select(scenarios(), args.only)
    if args.list:
        for scenario in chosen:
            kind = "control" if scenario.control else scenario.family
            print(f"{scenario.name:<52} {kind:<16} {scenario.description}")
        return 0
    if not chosen:
        print(f"--only {args.only!r} matches no scenario (see --list)", file=sys.stderr)
        return 2
    try:
        agents = (
            [AgentUnderTest(args.agent, load_agent_class(args.agent))]
            if args.agent
            else default_agents()
        )
    except AgentPathError as exc:
        print(exc, file=sys.stderr)
        return 2

    if args.fuzz is not None:
        from .lab.fuzz import run_fuzz_command

        return run_fuzz_command(args.fuzz, args.seed, agents, args.json, sys.stdout)
    started = time.perf_counter()

    def show(result: object) -> None:
        if not args.quiet:
            print(format_line(result), flush=True)  # type: ignore[arg-type]

    results = run_lab(chosen, agents, sweep=args.sweep, on_result=show)
    print_summary(results, agents, sys.stdout)
    print(f"wall time: {time.perf_counter() - started:.1f}s")
    if args.json is not None:
        write_json(results, args.json)
        print(f"results written to {args.json}")
    if args.timeline is not None:
        from .lab.timeline import write_timelines

        write_timelines((r.timeline for r in results if r.timeline is not None), args.timeline)
        print(f"timelines written to {args.timeline}")
    if args.report is not None:
        from .lab.html_report import write_report

        write_report(results, agents, args.report)
        print(f"report written to {args.report}")
    return exit_code(results, agents)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``resilient-agent`` console script."""
    args = _parser().parse_args(argv)
    if args.command == "lab":
        return _lab(args)
    raise AssertionError(f"unhandled command {args.command!r}")


if __name__ == "__main__":
    sys.exit(main())
