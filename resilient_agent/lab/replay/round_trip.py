"""The round trip over the catalog: record a call as livekit's report, replay it, compare.

Each catalog call runs on the agent class under test, is written as livekit's
``SessionReport.to_dict()`` (:mod:`resilient_agent.testing.session_report`), read back into a
plan and replayed on the same class. A call round-trips when the replay has the recording's
caller turns (within one frame), words lost, lines said and close (:mod:`.fidelity`); its
verdict is the same when the lab's contracts pass or fail on both, judged by the same
expectations: the catalog scenario's (which of the caller's words expect a reply and within
which bound, the farewell), which a report does not carry.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TextIO

from livekit.agents import Agent

from ...testing import ProviderFaults, Scenario, evaluate, run_scenario
from ...testing.session_report import session_report
from ..catalog import scenarios
from ..run import RESILIENT_PATH, load_agent_class, select
from .fidelity import FRAME_TOLERANCE_S, Divergence
from .plan import ReportError, load_plan
from .recording import SILERO_WINDOW_S, read_recording
from .run import run_replay

__all__ = ["CAUSES", "RoundTrip", "left_out", "round_trip", "run_round_trip"]

CAUSES: Mapping[str, str] = MappingProxyType(
    {
        "provider_fault": "a provider fault (the report records errors, not hangs or silence)",
        "verdict_only": "faithful, another verdict",
        "silero_opus": (
            "livekit's Silero on the Opus-coded recording (a turn's edge one 32 ms window off "
            "that the replay does not follow: a start, or an end where it heard the caller again)"
        ),
        "caller_estimate": "the caller's turns or words, estimated from the transcripts",
        "vad_fault": (
            "a VAD that failed in the recorded call (without its recording: the replay's VAD "
            "hears the caller)"
        ),
        "typed": "the caller's typed messages (when, and what reached the chat)",
        "hang_up_pad": "ResilientAgent's hang-up pad counted twice (the close 0.3 s late)",
        "hang_up": "the close's time",
        "handoffs": "the agents' handoffs",
        "lines": "what the agent said, or when it began a line",
        "unreadable": "a report the replay cannot read or replay",
    }
)
"""Why a catalog call does not round-trip, by the first that applies (see :func:`cause`)."""

# ResilientAgent's hang-up waits this long after a heard farewell (ConditionalHangup's
# tail_pad_s): a recorded close already has it, the replay's close on ResilientAgent adds it
_RESILIENT_TAIL_PAD_S = 0.3


@dataclass(frozen=True)
class RoundTrip:
    """One catalog call, recorded and replayed.

    Attributes:
        scenario: The catalog scenario.
        agent: The class it ran and was replayed on.
        divergences: How the replay differs from the recording, one line each.
        verdict: Whether the lab's contracts passed on the recorded call.
        replayed_verdict: Whether they passed on the replay, judged by the catalog scenario's
            expectations as the recorded call was.
        cause: Why it does not round-trip (a key of :data:`CAUSES`); None when it does.
    """

    scenario: str
    agent: str
    divergences: tuple[str, ...]
    verdict: bool
    replayed_verdict: bool
    cause: str | None = None

    @property
    def faithful(self) -> bool:
        """The replay did what the recording did."""
        return not self.divergences


def left_out(scenario: Scenario) -> str | None:
    """Why a catalog scenario cannot round-trip through a voice report, if it cannot."""
    if scenario.real_speech is not None:
        return "real speech"
    return None


def round_trip(
    scenario: Scenario, agent_class: type[Agent], audio_dir: Path | None = None
) -> RoundTrip:
    """Record ``scenario`` on ``agent_class`` as livekit's report and replay it on the same.

    With ``audio_dir``, livekit's recorder also records the call's audio there and the replay
    plays its caller channel (see :mod:`.recording`); without, the caller's audio is made from
    the report's turns.
    """
    audio = (
        audio_dir / f"{agent_class.__name__}__{scenario.name.replace('/', '__')}.ogg"
        if audio_dir is not None
        else None
    )
    world, outcome = run_scenario(scenario, agent_class, record_audio=audio)
    try:
        report = session_report(world)
        # the report has only the close: the round trip knows the recording agent's pad
        plan = load_plan(
            report, hang_up_pad=_RESILIENT_TAIL_PAD_S if agent_class is not Agent else 0.0
        )
        recording = read_recording(audio, report, plan) if audio is not None else None
    except ReportError as exc:
        return RoundTrip(
            scenario.name,
            agent_class.__name__,
            (f"unreadable: {exc}",),
            outcome.passed,
            False,
            "unreadable",
        )
    try:
        replay = run_replay(plan, agent_class, name=scenario.name, recording=recording)
    except ReportError as exc:
        return RoundTrip(
            scenario.name,
            agent_class.__name__,
            (f"not replayable: {exc}",),
            outcome.passed,
            False,
            "unreadable",
        )
    # the replay's own verdict knows only what the report says; the recorded call's verdict
    # also knows which words expected a reply and how soon: judge both by the same. Not the
    # hang-up's completeness (job shut down, room deleted): the report records only the close
    judge = dataclasses.replace(scenario, hang_up_within=None)
    judged = evaluate(dataclasses.replace(replay.world, scenario=judge))
    late = (
        replay.replayed.close_at - plan.close_at
        if replay.replayed.close_at is not None and plan.close_at is not None
        else None
    )
    return RoundTrip(
        scenario.name,
        agent_class.__name__,
        tuple(str(d) for d in replay.divergences),
        outcome.passed,
        judged.passed,
        cause(
            scenario,
            agent_class,
            replay.divergences,
            outcome.passed == judged.passed,
            late,
        ),
    )


def cause(
    scenario: Scenario,
    agent_class: type[Agent],
    found: Sequence[Divergence],
    same_verdict: bool,
    close_late: float | None,
) -> str | None:
    """Why a call does not round-trip (a key of :data:`CAUSES`), None when it does.

    Args:
        scenario: The catalog scenario.
        agent_class: The class it ran and was replayed on.
        found: The replay's divergences from the recording.
        same_verdict: The lab's contracts passed or failed on both.
        close_late: Seconds the replay closed later than the recording, if both closed.
    """
    if not found and same_verdict:
        return None
    if _has_fault(scenario):
        return "provider_fault"
    kinds = {d.kind for d in found}
    if not kinds:
        return "verdict_only"
    if scenario.vad == "silero" and _within_a_silero_window(found):
        return "silero_opus"
    if kinds & {"turns", "words"}:
        return "caller_estimate"
    if "typed" in kinds:
        return "typed"
    if scenario.vad_fault.mode != "healthy":
        return "vad_fault"
    if kinds == {"close"}:
        padded = (
            agent_class is not Agent
            and close_late is not None
            and abs(close_late - _RESILIENT_TAIL_PAD_S) <= FRAME_TOLERANCE_S
        )
        return "hang_up_pad" if padded else "hang_up"
    if "handoffs" in kinds:
        return "handoffs"
    return "lines"


def _within_a_silero_window(found: Sequence[Divergence]) -> bool:
    """A turn's edge moved by one Silero window, and the lines after it by as much, no more.

    The replay's Silero ends a turn at the report's time within two windows
    (:mod:`~...testing.silero_edges`); what is left here is an edge it does not follow.
    """
    window = SILERO_WINDOW_S + FRAME_TOLERANCE_S
    return any(d.kind == "turns" for d in found) and all(
        d.kind in ("turns", "lines") and 0 < d.off_by <= window for d in found
    )


def _has_fault(scenario: Scenario) -> bool:
    """The call's providers fail: the replay's answer at the recorded times instead."""
    # a realtime model's answer with no audio (a silent turn) is its provider's failure too
    llm_faults = any(
        r.hangs_before is not None
        or r.times_out_before is not None
        or r.keeps_alive_before is not None
        or r.silent_answers
        for r in scenario.llm
    )
    return (
        llm_faults or scenario.provider_faults != ProviderFaults() or scenario.lost_playout_report
    )


def run_round_trip(only: str | None, out: TextIO, *, audio: bool = True) -> int:
    """``resilient-agent replay --round-trip``: print every call that diverges, then the figures.

    With ``audio``, each call's audio is recorded with livekit's recorder and the replay plays
    its caller channel; without, the caller is made from the transcripts (``--no-recording``).

    Returns:
        0 when every call round-trips with the same verdict, 1 otherwise.
    """
    started = time.perf_counter()
    chosen = select(scenarios(), only)
    runnable = [s for s in chosen if left_out(s) is None]
    classes: list[type[Agent]] = [Agent, load_agent_class(RESILIENT_PATH)]
    trips: list[RoundTrip] = []
    # livekit's recorder writes each call's audio here, for its replay
    audio_dir = tempfile.TemporaryDirectory(prefix="round-trip-audio-") if audio else None
    for scenario in runnable:
        for cls in classes:
            trip = round_trip(scenario, cls, Path(audio_dir.name) if audio_dir else None)
            trips.append(trip)
            if not trip.faithful or trip.verdict != trip.replayed_verdict:
                verdicts = f"verdict {_word(trip.verdict)} -> {_word(trip.replayed_verdict)}"
                print(f"DIVERGES  {trip.scenario:<52} {trip.agent:<15} {verdicts}", file=out)
                for line in trip.divergences:
                    print(f"          {line}", file=out)
    if audio_dir is not None:
        audio_dir.cleanup()
    faithful = sum(t.faithful for t in trips)
    same = sum(t.verdict == t.replayed_verdict for t in trips)
    left = len(chosen) - len(runnable)
    left_out_clause = f"; {left} scenario(s) left out: real speech" if left else ""
    print(
        f"round trip: {len(trips)} catalog call(s) ({len(runnable)} scenario(s) x "
        f"{len(classes)} agents{left_out_clause})",
        file=out,
    )
    print(
        "  the caller: "
        + (
            "each call's audio as livekit's recorder wrote it (channel 0)"
            if audio
            else "audio made from the transcripts (--no-recording)"
        ),
        file=out,
    )
    print(
        f"  replayed within one frame (same turns, words lost, lines, handoffs, close): {faithful}",
        file=out,
    )
    print(f"  same verdict: {same}", file=out)
    for cls in classes:
        mine = [t for t in trips if t.agent == cls.__name__]
        print(
            f"  {cls.__name__}: {sum(t.faithful for t in mine)} of {len(mine)} faithful, "
            f"{sum(t.verdict == t.replayed_verdict for t in mine)} same verdict",
            file=out,
        )
    causes = [t.cause for t in trips if t.cause is not None]
    if causes:
        print(f"  {len(causes)} diverging, by cause:", file=out)
        for key, text in CAUSES.items():
            if causes.count(key):
                print(f"    {causes.count(key):3d}  {text}", file=out)
    print(f"wall time: {time.perf_counter() - started:.1f}s", file=out)
    return 0 if faithful == same == len(trips) else 1


def _word(passed: bool) -> str:
    return "PASS" if passed else "FAIL"
