"""The ``resilient-agent`` command: the race lab for LiveKit voice agents."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from livekit.agents import Agent

    from ..testing.scenario import Scenario
    from .fuzz_own_tools import OwnTools
    from .run import AgentUnderTest, LabResult

__all__ = ["main"]

_DESCRIPTION = (
    "resilient-agent replays the timing races of LiveKit voice agents (words lost while a "
    "protected speech plays, a caller who talks in the gap before a tool's hold message, a "
    "hang-up on a caller who interrupted the goodbye, a stuck VAD, a hung LLM) offline, on "
    "virtual time, against real AgentSessions, and judges each call by what the caller "
    "experienced. Start with: resilient-agent lab"
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="resilient-agent", description=_DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    lab = commands.add_parser(
        "lab",
        help="run the race catalog offline against real AgentSessions",
        description=(
            "Run the race catalog against a plain livekit.agents.Agent (the reference, whose "
            "races are expected to fail) and ResilientAgent (under test) on virtual time, print "
            "one line per call and a summary table. With --agent module:Class only that class "
            "runs, under test; the current directory is importable, so an app's own agent "
            "works: resilient-agent lab --agent myapp:MyAgent. Exit code 0 only if every "
            "contract holds for the agents under test, 1 if one breaks, 2 on a usage error."
        ),
    )
    lab.add_argument(
        "--agent",
        metavar="MODULE:CLASS",
        help="run only this Agent subclass (under test), e.g. myapp:MyAgent or "
        "livekit.agents:Agent",
    )
    lab.add_argument(
        "--mock",
        metavar="PATH",
        type=Path,
        help="with --agent: a Python file whose MOCKS dict (tool name: callable, given the "
        "tool's arguments by name) replaces your tools with side effects, and whose ARGUMENTS dict "
        "(tool name: arguments) says what the LLM calls your tools with",
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
    lab.add_argument(
        "--traces",
        metavar="PATH",
        type=Path,
        help="trace every call through livekit's OpenTelemetry tracer and write its spans (and "
        "the race events on them) as JSON lines",
    )
    lab.add_argument(
        "--record",
        metavar="DIR",
        type=Path,
        help="write every call as livekit's session report (SessionReport.to_dict() JSON), "
        "DIR/AGENT/FAMILY__VARIANT.json, and its audio as livekit's recorder writes it "
        "(record=True), DIR/AGENT/FAMILY__VARIANT.ogg, which resilient-agent replay reads "
        "(--recording)",
    )
    lab.add_argument("--list", action="store_true", help="list the scenarios and exit")
    lab.add_argument(
        "--fuzz",
        metavar="N",
        type=int,
        help="run N seeded random calls instead of the catalog; failures are shrunk",
    )
    lab.add_argument(
        "--explore",
        metavar="N",
        type=int,
        help="run each scenario (with --fuzz: each fuzzed call) under N seeded delivery "
        "schedules (sources made late by a few milliseconds, reordered among what is ready at "
        "once); failures are shrunk",
    )
    lab.add_argument(
        "--schedule",
        metavar="TOKEN",
        help="run the scenarios under one schedule, as --explore prints it (SEED or "
        "SEED:source#index+...), to replay a failure exactly",
    )
    lab.add_argument(
        "--seed", metavar="S", type=int, help="the --fuzz or --explore seed (default 0)"
    )
    lab.add_argument(
        "--jobs",
        metavar="J",
        type=int,
        default=1,
        help="judge --fuzz or --explore calls in J processes (same results; agents importable "
        "by path)",
    )
    lab.add_argument("--quiet", action="store_true", help="print only the summary table")
    lab.add_argument(
        "--app-logs",
        action="store_true",
        help="with --agent: let your app's own log lines through (left out by default)",
    )
    lab.add_argument(
        "--speech",
        choices=("scripted", "real"),
        default="scripted",
        help="real: espeak-ng voices, the embedded VAD and PocketSphinx instead of scripted "
        "speech (needs espeak-ng and resilient-agent[speech]); races real audio cannot "
        "reproduce are left out, with the reason",
    )
    lab.add_argument(
        "--stack",
        metavar="NAME",
        help="run the pipeline calls on real provider plugins (livekit-plugins-*) pointed at "
        "local emulators of their wire protocols, offline with no keys: "
        "deepgram+openai+cartesia, deepgram+google+cartesia or openai-stt+openai+cartesia; "
        "gemini-live or openai-realtime run the realtime calls on that provider's real "
        "speech-to-speech model (needs resilient-agent[providers])",
    )
    from .replay.cli import add_replay_parser

    add_replay_parser(commands)
    return parser


class _UsageError(Exception):
    """A mistake in the command line: reported as one line on stderr, exit code 2."""


def _check_args(args: argparse.Namespace) -> None:
    if args.only is not None:
        try:
            re.compile(args.only)
        except re.error as exc:
            raise _UsageError(f"--only {args.only!r} is not a regular expression: {exc}") from exc
    if args.jobs < 1:
        raise _UsageError(f"--jobs {args.jobs}: give 1 or more processes")
    if args.mock is not None and args.agent is None:
        raise _UsageError("--mock only applies with --agent module:Class (your tools' mocks)")
    if args.fuzz is not None and args.fuzz < 1:
        raise _UsageError(f"--fuzz {args.fuzz}: give 1 or more calls")
    if args.explore is not None and args.explore < 1:
        raise _UsageError(f"--explore {args.explore}: give 1 or more schedules")
    if args.schedule is not None:
        from ..testing.schedule import Schedule

        try:
            Schedule.parse(args.schedule)
        except ValueError as exc:
            raise _UsageError(f"--schedule: {exc}") from exc
    useless = _useless_options(args)
    if useless:
        raise _UsageError(useless[0])
    if args.stack is not None:
        from ..testing.stacks import StackUnavailable, check_stack

        try:
            check_stack(args.stack)
        except StackUnavailable as exc:
            raise _UsageError(f"--stack: {exc}") from exc
    for option in ("json", "report", "timeline", "traces"):
        path: Path | None = getattr(args, option)
        if path is not None and not path.parent.is_dir():
            raise _UsageError(f"--{option} {str(path)!r}: no directory {str(path.parent)!r}")


def _useless_options(args: argparse.Namespace) -> list[str]:
    """Options that would do nothing in the mode chosen: one line each, with what to do."""
    found = []
    fuzz = args.fuzz is not None
    explore = args.explore is not None
    if not fuzz and not explore:
        if args.seed is not None:
            found.append("--seed only applies with --fuzz N or --explore N: add one or drop --seed")
        if args.jobs != 1:
            found.append("--jobs only applies with --fuzz N or --explore N: add one or drop --jobs")
    if args.stack is not None:
        stacked = (
            ("--fuzz N", fuzz, "fuzzed calls run on the lab's scripted providers"),
            ("--explore N", explore, "the explorer schedules the lab's scripted providers"),
            ("--schedule", args.schedule is not None, "a schedule replays scripted providers"),
            ("--speech real", args.speech == "real", "a stack's emulators hear marked audio"),
        )
        found += _not_with("--stack", stacked, mode_first=True)
    if args.schedule is not None:
        scheduled = (
            ("--fuzz", fuzz, "each fuzzed call's schedule is in its printed snippet"),
            ("--explore", explore, "the explorer draws its own schedules"),
            ("--sweep", args.sweep, "a replay runs the scenario as written"),
            ("--speech real", args.speech == "real", "real speech's models are not scheduled"),
        )
        found += _not_with("--schedule", scheduled, mode_first=True)
    if explore and not fuzz:
        explore_only_json = (
            ("--sweep", args.sweep, "each schedule runs the scenario as written"),
            ("--report", args.report is not None, "the explorer writes only --json"),
            ("--timeline", args.timeline is not None, "the explorer writes only --json"),
            ("--traces", args.traces is not None, "the explorer writes only --json"),
            ("--record", args.record is not None, "the explorer writes only --json"),
            ("--speech real", args.speech == "real", "real speech's models are not scheduled"),
        )
        found += _not_with("--explore N", explore_only_json)
    if args.list:
        for option in (
            "fuzz",
            "explore",
            "schedule",
            "sweep",
            "json",
            "report",
            "timeline",
            "traces",
            "record",
        ):
            if getattr(args, option) not in (None, False):
                found.append(f"--list only lists the scenarios: drop --{option} or --list")
    elif fuzz:
        catalog_only = (
            ("--sweep", args.sweep, "fuzzed calls have no race window to sweep"),
            ("--only", args.only is not None, "fuzzed calls are not chosen from the catalog"),
            ("--report", args.report is not None, "the fuzzer writes only --json"),
            ("--timeline", args.timeline is not None, "the fuzzer writes only --json"),
            ("--traces", args.traces is not None, "the fuzzer writes only --json"),
            ("--record", args.record is not None, "the fuzzer writes only --json"),
            ("--speech real", args.speech == "real", "fuzzed calls use scripted speech"),
        )
        found += _not_with("--fuzz N", catalog_only)
    return found


def _not_with(
    mode: str, options: Sequence[tuple[str, bool, str]], *, mode_first: bool = False
) -> list[str]:
    """One line per option given that cannot go with ``mode``: ``(option, given, why)``."""
    lines = []
    for option, given, why in options:
        if given:
            first, second = (mode, option) if mode_first else (option, mode)
            lines.append(f"{first} does not apply with {second} ({why}): drop one of them")
    return lines


def _lab_with_app_logs(args: argparse.Namespace) -> int:
    if args.app_logs:
        return _lab(args)
    from .app_logs import app_logs_silenced

    with app_logs_silenced():
        return _lab(args)


def _lab(args: argparse.Namespace) -> int:
    from .catalog import scenarios
    from .catalog.own_tools import FAMILY as OWN_TOOLS_FAMILY
    from .catalog.own_tools import app_tool_scenarios
    from .results import exit_code, format_line, print_header, print_summary
    from .run import run_lab, select

    _check_args(args)
    if args.stack is not None and args.agent is not None:
        _offline_keys(args.stack)
    if args.stack is None and args.agent is not None:
        with _offline_keys_while_checked():
            agents, note = _agents(args.agent)
            _check_no_provider_plugins(agents[0])
    else:
        agents, note = _agents(args.agent)
    if args.stack is not None and args.agent is not None:
        _check_redirects(agents[0], args.stack)
    if args.only is not None and not _may_match(args.only, scenarios(), agents):
        raise _UsageError(f"--only {args.only!r} matches no scenario (see --list)")
    if note is not None:
        print(note)
    own_tools = _own_tools(agents[0], args.mock, args.stack) if args.agent is not None else None
    own = [] if own_tools is None else app_tool_scenarios(own_tools.windows, own_tools.mocks)
    chosen = select([*scenarios(), *own], args.only)
    if args.list:
        for scenario in chosen:
            kind = "control" if scenario.control else scenario.family
            print(f"{scenario.name:<52} {kind:<16} {scenario.description}")
        return 0
    if not chosen:
        raise _UsageError(f"--only {args.only!r} matches no scenario (see --list)")
    if args.speech == "real":
        from .real_speech_variants import RealSpeechUnavailable, with_real_speech

        scripted_only = [s for s in chosen if s.family == OWN_TOOLS_FAMILY]
        try:
            chosen = with_real_speech(
                [s for s in chosen if s.family != OWN_TOOLS_FAMILY], sys.stdout
            )
        except RealSpeechUnavailable as exc:
            raise _UsageError(str(exc)) from exc
        if scripted_only:
            print(f"{len(scripted_only)} scenario(s) on your own tools run with scripted speech")
            chosen = [*chosen, *scripted_only]
    if args.stack is not None:
        from .stacks import stack_variants

        chosen, left_out = stack_variants(chosen, args.stack)
        print(
            f"stack {args.stack}: {len(chosen)} call(s) on real provider plugins against local "
            f"wire emulators, {len(left_out)} left out"
        )
        if not args.quiet:
            for out in left_out:
                print(f"LEFT OUT  {out.scenario:<52} {out.why}")
        if not chosen:
            raise _UsageError(f"--stack {args.stack}: no scenario chosen can run on a stack")
    if args.fuzz is not None:
        from .fuzz import run_fuzz_command

        seed = 0 if args.seed is None else args.seed
        return run_fuzz_command(
            args.fuzz,
            seed,
            agents,
            args.json,
            sys.stdout,
            jobs=args.jobs,
            quiet=args.quiet,
            own=own_tools,
            schedules=args.explore or 0,
        )
    if args.explore is not None:
        from .explore import run_explore_command

        return run_explore_command(
            chosen,
            agents,
            args.explore,
            0 if args.seed is None else args.seed,
            args.json,
            sys.stdout,
            jobs=args.jobs,
            quiet=args.quiet,
        )
    started = time.perf_counter()
    print_header(agents, sys.stdout)
    skipped: list[tuple[str, str]] = []

    def show(result: LabResult) -> None:
        if not args.quiet:
            print(format_line(result), flush=True)

    def skip(scenario: Scenario, agent: AgentUnderTest, why: str) -> None:
        skipped.append((scenario.name, agent.path))
        print(f"SKIP  {scenario.name:<52} {agent.label:<16} {why}", flush=True)

    with _scheduled(args.schedule) as scheduled:
        results = run_lab(
            scheduled(chosen),
            agents,
            sweep=args.sweep,
            on_result=show,
            on_skip=skip,
            traces=args.traces is not None,
            stack=args.stack,
            record=args.record,
        )
    if not results:
        raise _UsageError(f"no scenario could run on {agents[0].label} (see the SKIP lines)")
    print_summary(results, agents, sys.stdout, skipped)
    if args.agent is not None:
        _print_configuration_notes(agents[0], own_tools)
    if skipped:
        print(f"{len(skipped)} scenario(s) skipped: their app code cannot be built on this class")
    print(f"wall time: {time.perf_counter() - started:.1f}s")
    _write_outputs(args, results, agents)
    untraced = _write_traces(args.traces, results) if args.traces is not None else 0
    return exit_code(results, agents) or (1 if untraced else 0)


@contextlib.contextmanager
def _scheduled(
    token: str | None,
) -> Iterator[Callable[[Sequence[Scenario]], list[Scenario]]]:
    """Run the block's calls under ``--schedule``'s schedule, judged as the explorer judges."""
    if token is None:
        yield list
        return
    from ..testing.schedule import Schedule, explored
    from .explore import with_jitter_slack

    schedule = Schedule.parse(token)
    print(f"schedule {schedule.token()}")
    with explored(schedule):
        yield lambda chosen: [with_jitter_slack(s) for s in chosen]


def _agents(path: str | None) -> tuple[list[AgentUnderTest], str | None]:
    """The agents to run: the defaults, or the ``--agent`` class adapted to the catalog.

    Returns:
        The agents, and the line saying how the catalog runs on the ``--agent`` class, if any.
    """
    from .app_agent import AppClassError, catalog_base
    from .run import AgentPathError, AgentUnderTest, default_agents, load_agent_class

    if path is None:
        return default_agents(), None
    # a console script does not put the current directory on the path, and an app's module is
    # usually right there, or in its src/ (LiveKit's starter layout, run from the app's root)
    for folder in reversed([os.getcwd(), os.path.join(os.getcwd(), "src")]):
        if os.path.isdir(folder) and folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        cls = load_agent_class(path)
        base = catalog_base(cls)
    except (AgentPathError, AppClassError) as exc:
        raise _UsageError(
            f"--agent {path!r}: {exc}" if isinstance(exc, AppClassError) else str(exc)
        ) from exc
    _check_builds(path, base.cls)
    return [AgentUnderTest(path, cls, catalog_cls=base.cls)], base.note


def _check_builds(path: str, cls: type[Agent]) -> None:
    """Build the app's agent once: a configuration mistake is then one line, before any call."""
    from .._engine.errors import MiddlewareError
    from .app_tools import function_tools
    from .catalog.own_tools import build_app_agent

    try:
        agent = build_app_agent(cls)
    except MiddlewareError as exc:  # OptionError, PluginError: the message names the fix
        raise _UsageError(f"--agent {path!r}: {exc}") from exc
    try:
        function_tools(agent)
    except ValueError as exc:  # livekit refuses the tools: two of one name
        raise _UsageError(f"--agent {path!r}: its tools cannot be used: {exc}") from exc


# the key each provider plugin reads from the environment when the app passes none
_KEY_VARIABLES = (
    ("deepgram", "DEEPGRAM_API_KEY"),
    ("openai", "OPENAI_API_KEY"),
    ("google", "GOOGLE_API_KEY"),
    ("cartesia", "CARTESIA_API_KEY"),
)


def _offline_keys(stack: str) -> None:
    """A dummy key for each of the stack's providers whose variable is unset.

    An app builds ``deepgram.STT()`` with no key, reading it from the environment, and the
    plugin refuses to be built without one; the emulators accept any key, and a redirected
    instance sends it to loopback only.
    """
    from ..testing.stacks import check_stack

    plugins = check_stack(stack).plugins
    for plugin, variable in _KEY_VARIABLES:
        if plugin in plugins:
            os.environ.setdefault(variable, "lab-offline-key")


@contextlib.contextmanager
def _offline_keys_while_checked() -> Iterator[None]:
    """Every unset provider key variable set to a dummy while the app's agent is first built.

    Without a stack an agent's own provider plugin is refused before any call
    (:func:`_check_no_provider_plugins`): the key lets it be built, so that the refusal names
    the plugin rather than its missing key. The dummies go once checked: an agent with no
    provider plugin of its own needs none, and its calls never see them.
    """
    unset = [variable for _, variable in _KEY_VARIABLES if variable not in os.environ]
    for variable in unset:
        os.environ[variable] = "lab-offline-key"
    try:
        yield
    finally:
        for variable in unset:
            os.environ.pop(variable, None)


def _check_redirects(agent: AgentUnderTest, stack: str) -> None:
    """The app's own plugin instances the stack redirects: one line, or the one that it cannot."""
    from ..testing.redirect import NotRedirectable, check_redirects
    from ..testing.stacks import STACKS
    from .catalog.own_tools import build_app_agent

    if STACKS[stack].realtime is not None:
        return
    try:
        described = check_redirects(
            build_app_agent(agent.catalog_cls or agent.cls), stack, agent.label
        )
    except NotRedirectable as exc:
        raise _UsageError(f"--stack {stack}: {exc}") from exc
    if described:
        print(
            f"stack {stack}: {agent.label}'s own {', '.join(described)} redirected to the "
            "emulators, their options kept"
        )


def _check_no_provider_plugins(agent: AgentUnderTest) -> None:
    """Without a stack, the app's own provider plugins would reach the real providers: refused."""
    from ..testing.redirect import NotRedirectable, refuse_provider_plugins
    from .catalog.own_tools import build_app_agent

    try:
        refuse_provider_plugins(build_app_agent(agent.catalog_cls or agent.cls), agent.label)
    except NotRedirectable as exc:
        raise _UsageError(f"--agent {agent.path!r}: {exc}") from exc


def _may_match(only: str, catalog: Sequence[Scenario], agents: Sequence[AgentUnderTest]) -> bool:
    """Whether ``--only`` matches a catalog scenario or one the app's own tools may get."""
    from .app_tools import function_tools
    from .catalog.own_tools import FAMILY, WINDOW_NAMES, build_app_agent

    pattern = re.compile(only)
    names = [s.name for s in catalog]
    for agent in agents:
        if agent.catalog_cls is not None:
            tools = function_tools(build_app_agent(agent.catalog_cls))
            names += [f"{FAMILY}/{tool}/{window}" for tool in tools for window in WINDOW_NAMES]
    return any(pattern.search(name) for name in names)


def _print_configuration_notes(agent: AgentUnderTest, own_tools: OwnTools | None) -> None:
    from .app_config import configuration_notes
    from .catalog.own_tools import build_app_agent

    built = build_app_agent(agent.catalog_cls or agent.cls)
    notes = configuration_notes(built, agent.label, own_tools.windows if own_tools else ())
    if notes:
        print("your configuration:")
        for note in notes:
            print(f"  {note}")


def _own_tools(
    agent: AgentUnderTest, mock_path: Path | None, stack: str | None = None
) -> OwnTools | None:
    """The app's own tools, each probed (one line per tool); None when it has none."""
    from .app_config import runs_for_real_line
    from .app_tools import MockFileError, ToolMocks, load_mocks
    from .catalog.own_tools import build_app_agent, describe, tool_windows
    from .fuzz_own_tools import OwnTools

    cls = agent.catalog_cls or agent.cls
    if stack is not None and _realtime_stack_with_own_plugins(stack, build_app_agent(cls)):
        # a probe is a pipeline call: a realtime stack would run it on the lab's scripted
        # providers, where the agent's own model would reach its real provider
        print(
            f"{agent.label}'s own tools are not raced on --stack {stack}: their calls are "
            "pipeline calls, which a realtime stack leaves out"
        )
        return None
    try:
        mocks = load_mocks(mock_path) if mock_path is not None else ToolMocks()
        # named before any probe runs them
        real = runs_for_real_line(build_app_agent(cls), mocks, agent.label)
        if real is not None:
            print(real)
        windows = tool_windows(cls, mocks, stack=stack)
    except MockFileError as exc:
        raise _UsageError(str(exc)) from exc
    if not windows:
        print(f"{agent.label} has no function tools of its own: only the catalog runs")
        return None
    for line in describe(windows):
        print(line)
    return OwnTools(agent.path, windows, mocks, None if mock_path is None else str(mock_path))


def _realtime_stack_with_own_plugins(stack: str, agent: Agent) -> bool:
    from ..testing.redirect import has_own_plugins
    from ..testing.stacks import STACKS

    return STACKS[stack].realtime is not None and has_own_plugins(agent)


def _write_outputs(
    args: argparse.Namespace, results: Sequence[LabResult], agents: Sequence[AgentUnderTest]
) -> None:
    if args.json is not None:
        from .results import write_json

        write_json(results, args.json)
        print(f"results written to {args.json}")
    if args.timeline is not None:
        from .timeline import write_timelines

        write_timelines((r.timeline for r in results if r.timeline is not None), args.timeline)
        print(f"timelines written to {args.timeline}")
    if args.report is not None:
        from .html_report import write_report

        write_report(results, agents, args.report)
        print(f"report written to {args.report}")


def _write_traces(path: Path, results: Sequence[LabResult]) -> int:
    """Write the spans, then check every race is on them; returns the races that are not."""
    from .traces import race_span_events, untraced_races, write_traces

    count = write_traces(results, path)
    races = sum(len(r.outcome.race_events) for r in results)
    on_spans = sum(1 for r in results for _ in race_span_events(r.spans))
    untraced = 0
    for result in results:
        for race in untraced_races(result.outcome.race_events, result.spans):
            untraced += 1
            print(
                f"UNTRACED  {result.scenario.name:<52} {result.agent.label:<16} "
                f"{race['event']} {race['kind']}"
            )
    print(
        f"traces: {count} spans of {len(results)} calls written to {path}; {races} race "
        f"events, {races - untraced} of them span events on livekit's spans"
        + (f" ({on_spans} span events)" if on_spans != races else "")
    )
    early = sorted({span["name"] for r in results for span in r.spans if span["start"] < 0})
    if early:
        # the lab's speaker stamps playback with loop time where livekit expects a wall clock
        print(
            f"note: in the traces, {', '.join(early)} start before the call (a negative "
            "'start'): livekit dates them from the lab speaker's playback stamp, which is loop "
            "time rather than wall time (docs/lab.md, known gaps of the fakes)"
        )
    return untraced


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``resilient-agent`` console script.

    Returns:
        0 when every contract holds for the agents under test, 1 when one breaks, 2 on a usage
        error (reported as one line on stderr).
    """
    from .._engine.errors import MiddlewareError

    args = _parser().parse_args(argv)
    try:
        if args.command == "lab":
            return _lab_with_app_logs(args)
        if args.command == "replay":
            from .replay.cli import replay_command

            return replay_command(args)
    except MiddlewareError as exc:  # a configuration mistake: its message names the fix
        print(f"resilient-agent {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except _UsageError as exc:
        print(f"resilient-agent {args.command}: error: {exc}", file=sys.stderr)
        return 2
    raise AssertionError(f"unhandled command {args.command!r}")


if __name__ == "__main__":
    sys.exit(main())
