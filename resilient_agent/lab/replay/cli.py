"""``resilient-agent replay``: a recorded call replayed on ``Agent`` and on the agent under test."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from livekit.agents import Agent

    from .plan import ReplayPlan
    from .recording import ReplayRecording
    from .run import ReplayRun

__all__ = ["add_replay_parser", "replay_command"]


def add_replay_parser(commands: Any) -> None:
    """Add the ``replay`` command to the ``resilient-agent`` subcommands."""
    replay = commands.add_parser(
        "replay",
        help="replay a production call from livekit's session report",
        description=(
            "Rebuild a call from livekit's session report (SessionReport.to_dict() JSON, as "
            "on_session_end gets it from ctx.make_session_report()) and replay it offline on "
            "virtual time: on a plain livekit.agents.Agent, checked against the recording "
            "(same caller turns, same words lost, same hang-up), and on ResilientAgent or your "
            "class (--agent), judged by the lab's contracts. Exit code 0 when the replay is "
            "faithful and the agent under test keeps the call, 1 otherwise, 2 on a usage error "
            "or a report it cannot read."
        ),
    )
    replay.add_argument("report", metavar="REPORT", nargs="?", type=Path, help="the report")
    replay.add_argument(
        "--agent",
        metavar="MODULE:CLASS",
        help="replay on your Agent subclass (its own tools run, or their --mock) instead of "
        "ResilientAgent",
    )
    replay.add_argument(
        "--mock",
        metavar="PATH",
        type=Path,
        help="with --agent: a Python file whose MOCKS dict replaces your tools with side "
        "effects (as for resilient-agent lab)",
    )
    replay.add_argument(
        "--emit-test",
        metavar="PATH",
        type=Path,
        help="write the replay as a pytest test that fails on plain Agent where the recorded "
        "call lost words",
    )
    replay.add_argument(
        "--redact",
        action="store_true",
        help="with --emit-test: replace the caller's and the agent's words in what it writes",
    )
    replay.add_argument(
        "--explore",
        metavar="N",
        type=int,
        help="also run the replay on the agent under test under N seeded delivery schedules "
        "(as resilient-agent lab --explore): a call that fails under nearby schedules is "
        "fragile, not just unlucky",
    )
    replay.add_argument(
        "--round-trip",
        action="store_true",
        help="instead of a report: record every catalog call as livekit's report, replay it "
        "on the agent that made it, and count the calls replayed within one frame",
    )
    replay.add_argument(
        "--only", metavar="REGEX", help="with --round-trip: the catalog calls whose name matches"
    )
    replay.add_argument(
        "--recording",
        metavar="FILE",
        type=Path,
        help="the call's audio as livekit recorded it (session.start(record=True): audio.ogg "
        "in the job's session directory): the caller's channel is the replayed caller's audio; "
        "without it, the caller's audio is made from the report's turn timings",
    )
    replay.add_argument(
        "--hang-up-pad",
        metavar="SECONDS",
        type=float,
        default=0.0,
        help="seconds the recorded agent waited between asking to hang up and hanging up "
        "(the report has only the close; ResilientAgent waits 0.3 after a heard farewell): "
        "the replay asks that much earlier (default 0)",
    )
    replay.add_argument(
        "--no-recording",
        action="store_true",
        help="replay without the call's audio recording (the caller's audio made from the "
        "transcripts): with a REPORT, not the one its audio_recording_path names; with "
        "--round-trip, each call's",
    )


class ReplayUsageError(Exception):
    """A mistake in the replay command line: one line on stderr, exit code 2."""


def replay_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``resilient-agent replay``; a usage or report error is one line on stderr, exit 2."""
    out = out if out is not None else sys.stdout
    from ..run import RESILIENT_PATH, quiet_logs
    from .plan import ReportError, load_plan, read_report
    from .recording import read_recording
    from .typed_claims import with_recorded_claims
    from .vad_evidence import with_vad_evidence

    try:
        _check(args)
        if args.round_trip:
            from .round_trip import run_round_trip

            with quiet_logs():
                return run_round_trip(args.only, out, audio=not args.no_recording)
        report = read_report(args.report)
        plan = load_plan(report, hang_up_pad=args.hang_up_pad)
        notes: list[str] = []
        audio = args.recording
        if audio is None and not args.no_recording:
            audio = _reports_recording(args.report, report, notes, args.explore is not None)
        recording = read_recording(audio, report, plan) if audio is not None else None
        if recording is not None:
            # their assumptions are printed
            plan = with_vad_evidence(with_recorded_claims(plan, recording), recording)
        agent_class, app = _agent_under_test(args.agent)
        with quiet_logs():
            code = _replay(plan, args, agent_class, app, out, recording, notes)
        if args.emit_test is not None:
            from .emit import write_test

            emitted = audio if audio is not None and not args.redact else None
            written = write_test(
                report,
                args.emit_test,
                agent_path=args.agent or RESILIENT_PATH,
                redact=args.redact,
                source=args.report.name,
                recording=emitted,
                hang_up_pad=args.hang_up_pad,
            )
            print(f"wrote {', '.join(str(p) for p in written)}", file=out)
            if audio is not None and emitted is None:
                print(
                    "the test replays without the recording: --redact cannot redact its audio",
                    file=out,
                )
        return code
    except (ReportError, ReplayUsageError) as exc:
        print(f"resilient-agent replay: error: {exc}", file=sys.stderr)
        return 2


def _check(args: argparse.Namespace) -> None:
    if args.round_trip and args.report is not None:
        raise ReplayUsageError("give a REPORT or --round-trip, not both")
    if not args.round_trip and args.report is None:
        raise ReplayUsageError("give the REPORT to replay (or --round-trip)")
    if args.only is not None and not args.round_trip:
        raise ReplayUsageError("--only goes with --round-trip")
    if args.mock is not None and args.agent is None:
        raise ReplayUsageError("--mock goes with --agent")
    if args.explore is not None and (args.round_trip or args.explore < 1):
        raise ReplayUsageError("--explore N takes a REPORT and N of 1 or more")
    if args.redact and args.emit_test is None:
        raise ReplayUsageError("--redact goes with --emit-test")
    if args.recording is not None and args.round_trip:
        raise ReplayUsageError("--recording goes with a REPORT (--round-trip records its own)")
    if not 0.0 <= args.hang_up_pad <= 10.0:
        raise ReplayUsageError("--hang-up-pad SECONDS takes 0 to 10 seconds")
    if args.round_trip and args.hang_up_pad:
        raise ReplayUsageError(
            "--hang-up-pad goes with a REPORT (--round-trip knows each agent's own)"
        )
    if args.no_recording and args.recording is not None:
        raise ReplayUsageError("give --recording FILE or --no-recording, not both")
    if args.recording is not None and args.explore is not None:
        raise ReplayUsageError("--recording does not go with --explore yet")


def _reports_recording(
    report_path: Path, report: Any, notes: list[str], exploring: bool
) -> Path | None:
    """The call's recording the report names, if it is there (``audio_recording_path``).

    livekit writes the path absolute, in the job's session directory, which is removed when the
    job ends: a recording copied beside the report (its name with ``.ogg``) is taken then. A
    relative path is taken from the report's directory.
    """
    named = report.get("audio_recording_path") if isinstance(report, dict) else None
    candidates: list[tuple[Path, str]] = []
    if isinstance(named, str) and named:
        path = Path(named)
        path = path if path.is_absolute() else report_path.parent / path
        candidates.append((path, "the report's audio_recording_path"))
    candidates.append((report_path.with_suffix(".ogg"), "beside the report"))
    for path, where in candidates:
        if path.is_file():
            if exploring:
                notes.append(
                    f"recording: {_shown(path)} ({where}) not played: not with --explore yet"
                )
                return None
            notes.append(f"recording: {_shown(path)} ({where}); --no-recording replays without it")
            return path
    if isinstance(named, str) and named:
        notes.append(
            f"the report's audio_recording_path {named} is not there: give the call's audio "
            "with --recording FILE"
        )
    return None


def _shown(path: Path) -> str:
    """``path`` from the working directory when it is under it, else as it is."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _agent_under_test(path: str | None) -> tuple[type[Agent], bool]:
    """The class the verdict runs on, and whether it is the app's own."""
    from ..run import LAB_AGENT_PATHS, RESILIENT_PATH, AgentPathError, load_agent_class

    try:
        # livekit's Agent or ResilientAgent named: the replay's own agent, as --emit-test's
        return load_agent_class(path or RESILIENT_PATH), path not in (None, *LAB_AGENT_PATHS)
    except AgentPathError as exc:
        raise ReplayUsageError(str(exc)) from exc


def _replay(
    plan: ReplayPlan,
    args: argparse.Namespace,
    agent_class: type[Agent],
    app: bool,
    out: TextIO,
    recording: ReplayRecording | None = None,
    notes: Sequence[str] = (),
) -> int:
    from livekit.agents import Agent

    from .recording import followed_ends
    from .run import run_replay

    print(_summary(args.report, plan), file=out)
    for note in notes:
        print(note, file=out)
    for assumed in plan.assumptions:
        print(f"assumed: {assumed}", file=out)
    if recording is None:
        print(
            "no recording: the caller's audio is made from the report's turn timings (the "
            "scripted VAD and STT hear it as the report says they did)",
            file=out,
        )
    for assumed in recording.assumptions if recording is not None else ():
        print(f"assumed: {assumed}", file=out)
    recorded = run_replay(plan, Agent, recording=recording)
    for assumed in followed_ends(recorded.world.vad):
        print(f"assumed: {assumed}", file=out)
    faithful = not recorded.divergences
    if faithful:
        print(
            f"Agent (as recorded): faithful: same {len(plan.turns)} caller turn(s), same words "
            f"lost ({recorded.outcome.lost_words}), same hang-up ({plan.close_reason})",
            file=out,
        )
    else:
        print(
            f"Agent (as recorded): {len(recorded.divergences)} divergence(s) from the recording:",
            file=out,
        )
        for divergence in recorded.divergences:
            print(f"  {divergence}", file=out)
    print(_verdict("Agent", recorded), file=out)
    mocks = _mocks(args.mock) if app else {}
    under_test = run_replay(plan, agent_class, app=app, tool_mocks=mocks, recording=recording)
    print(_verdict(agent_class.__name__, under_test), file=out)
    code = 0 if faithful and under_test.outcome.passed else 1
    if args.explore is not None:
        code = max(code, _explore(plan, args, agent_class, app, mocks, out))
    return code


def _explore(
    plan: ReplayPlan,
    args: argparse.Namespace,
    agent_class: type[Agent],
    app: bool,
    mocks: dict[str, Any],
    out: TextIO,
) -> int:
    """The replay on the agent under test under ``--explore`` delivery schedules."""
    from ..explore import run_explore_command
    from ..run import AgentUnderTest
    from .scenario import replay_scenario

    scenario = replay_scenario(plan, "replay/call", app=app, tool_mocks=mocks)
    path = args.agent or f"{agent_class.__module__}:{agent_class.__name__}"
    agent = AgentUnderTest(path, agent_class)
    return run_explore_command([scenario], [agent], args.explore, 0, None, out)


def _summary(path: Path, plan: ReplayPlan) -> str:
    said = sum(len(r.says) for r in plan.tool_runs) + len(plan.app_says)
    closed = (
        f"closed ({plan.close_reason}) at {plan.close_at:.2f} s"
        if plan.close_at is not None
        else "never closed"
    )
    typed = f", {len(plan.typed)} typed message(s)" if plan.typed else ""
    return (
        f"replay of {path} (livekit-agents {plan.sdk_version}): {len(plan.turns)} caller "
        f"turn(s){typed}, {len(plan.answers)} LLM answer(s), {len(plan.tool_runs)} tool run(s), "
        f"{said} line(s) the app said; the session {closed}"
    )


def _verdict(label: str, run: ReplayRun) -> str:
    outcome = run.outcome
    head = f"{label}: {'PASS' if outcome.passed else 'FAIL'}  lost words {outcome.lost_words}"
    handled = sorted({str(e.get("kind")) for e in outcome.race_events})
    lines = [head + (f"  races handled: {', '.join(handled)}" if handled else "")]
    lines.extend(f"  {reason}" for reason in outcome.reasons)
    return "\n".join(lines)


def _mocks(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    from ..app_tools import MockFileError, load_mocks

    try:
        return dict(load_mocks(path).mocks)
    except MockFileError as exc:
        raise ReplayUsageError(str(exc)) from exc
