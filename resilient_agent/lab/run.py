"""Runs the catalog against the agents under test and collects one result per call."""

from __future__ import annotations

import contextlib
import importlib
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from livekit.agents import Agent

from .._engine.log import library_logs_silenced
from ..testing import CallOutcome, Scenario, run_scenario
from ..testing.session_report import write_session_report
from ..testing.transcripts import utterance_transcripts
from .app_agent import catalog_base, scenario_mismatch
from .timeline import CallTimeline, extract_timeline
from .traces import CallTraces

__all__ = [
    "AgentUnderTest",
    "LabResult",
    "default_agents",
    "load_agent_class",
    "record_path",
    "run_lab",
]

BASELINE_PATH = "livekit.agents:Agent"
RESILIENT_PATH = "resilient_agent:ResilientAgent"
# the classes the lab and a replay build their own agent on; any other is an app's, with its own
# tools
LAB_AGENT_PATHS = (RESILIENT_PATH, BASELINE_PATH)


@dataclass(frozen=True)
class AgentUnderTest:
    """An agent base class the lab runs the catalog on.

    Attributes:
        path: ``module:Class``.
        cls: The class.
        reference: A reference run (the plain ``Agent`` beside ``ResilientAgent``): its races are
            expected, and it does not decide the exit code.
        catalog_cls: The class each scenario's app code subclasses, when not ``cls`` itself
            (an app's class whose constructor takes no ``instructions``, see
            :func:`~resilient_agent.lab.app_agent.catalog_base`); a scenario whose app code
            cannot be built on it is skipped.
    """

    path: str
    cls: type[Agent]
    reference: bool = False
    catalog_cls: type[Agent] | None = None

    @property
    def label(self) -> str:
        """The class name, as shown in tables."""
        return self.cls.__name__

    def __reduce__(self) -> tuple[Any, ...]:
        # the adapter the lab builds on an app's class borrows that class's name and module, so
        # pickle cannot send it by reference to a worker process (``--jobs``): the worker gets
        # the path and builds the adapter again, as the command did
        adapted = self.catalog_cls not in (None, self.cls)
        if adapted:
            return (_adapted_agent, (self.path, self.reference))
        return (AgentUnderTest, (self.path, self.cls, self.reference, self.catalog_cls))


def _adapted_agent(path: str, reference: bool) -> AgentUnderTest:
    """An app's class, from its path, on the adapter :func:`.app_agent.catalog_base` builds."""
    cls = load_agent_class(path)
    return AgentUnderTest(path, cls, reference, catalog_base(cls).cls)


@dataclass(frozen=True)
class LabResult:
    """One scenario run on one agent.

    Attributes:
        scenario: The scenario.
        agent: The agent it ran on.
        outcome: The verdict and figures.
        onset: The moved utterance's onset in a ``--sweep`` run, else None.
        wall_seconds: Real seconds the run took.
        virtual_seconds: Call seconds simulated.
        timeline: What happened when, extracted right after the run (the call itself is not
            kept); None for a result built by hand.
        written_onset: In a ``--sweep`` run, where the moved utterance starts in the scenario
            as written, else None.
        stt: The STT the call ran with, ``provider:model``.
        transcripts: Real speech only: per utterance, what was said, heard live, given to the
            LLM, and the reference transcription (see ``testing.transcripts``).
        spans: With ``--traces``: the call's OpenTelemetry spans as records (see
            :mod:`~resilient_agent.lab.traces`), else empty.
    """

    scenario: Scenario
    agent: AgentUnderTest
    outcome: CallOutcome
    onset: float | None
    wall_seconds: float
    virtual_seconds: float
    timeline: CallTimeline | None = None
    written_onset: float | None = None
    stt: str = "resilient_agent.testing:scripted-marker-stt"
    transcripts: tuple[dict[str, Any], ...] = ()
    spans: tuple[dict[str, Any], ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The JSON record ``--json`` writes."""
        o = self.outcome
        record: dict[str, Any] = {
            "scenario": self.scenario.name,
            "family": self.scenario.family,
            "agent": self.agent.path,
            "passed": o.passed,
            "reasons": list(o.reasons),
            "reply_latency_s": o.reply_latency_s,
            "lost_words": o.lost_words,
            "end_user_state": o.end_user_state,
            "unfinished_handles": o.unfinished_handles,
            "interruption_timeouts": o.interruption_timeouts,
            "hung_up": o.hung_up,
            "talked_over_s": o.talked_over_s,
            "race_events": list(o.race_events),
            "speech": "scripted" if self.scenario.real_speech is None else "real",
            "stt": self.stt,
        }
        # the tools that ran, in the order they started: evidence that a scenario on the app's
        # own tools exercised them
        record["tools_run"] = (
            [t.name for t in sorted(self.timeline.tools, key=lambda t: t.start)]
            if self.timeline is not None
            else []
        )
        if self.transcripts:
            record["transcripts"] = list(self.transcripts)
        if self.onset is not None:
            record["onset_s"] = self.onset
        return record


class AgentPathError(ValueError):
    """``--agent`` does not name an importable ``Agent`` subclass; the message says which part."""


def load_agent_class(path: str) -> type[Agent]:
    """Import ``module:Class`` and check it is an ``Agent`` subclass.

    Raises:
        AgentPathError: The path is malformed, the module is missing or fails to import, it has
            no such attribute, or the attribute is not an ``Agent`` subclass; one line each.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise AgentPathError(f"--agent {path!r}: expected 'module:Class', e.g. {BASELINE_PATH}")
    module = _import_module(path, module_name)
    if not hasattr(module, attr):
        raise AgentPathError(f"--agent {path!r}: module {module_name!r} has no attribute {attr!r}")
    cls = getattr(module, attr)
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        what = "a class" if isinstance(cls, type) else f"a {type(cls).__name__} object"
        raise AgentPathError(
            f"--agent {path!r}: {attr!r} in {module_name} is {what} but not a "
            "livekit.agents.Agent subclass"
        )
    return cls


def _import_module(path: str, module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise AgentPathError(
                f"--agent {path!r}: no module named {exc.name!r} (looked in the current "
                "directory, its src/ and the installed packages)"
            ) from exc
        raise AgentPathError(
            f"--agent {path!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    except Exception as exc:  # an app module may fail any way when imported
        raise AgentPathError(
            f"--agent {path!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc


def default_agents() -> list[AgentUnderTest]:
    """Plain ``Agent`` as the reference and ``ResilientAgent`` under test, once it exists.

    Until ``ResilientAgent`` exists the plain ``Agent`` runs alone, as the lab's self-check.
    """
    baseline = load_agent_class(BASELINE_PATH)
    try:
        resilient = load_agent_class(RESILIENT_PATH)
    except AgentPathError:
        return [AgentUnderTest(BASELINE_PATH, baseline, reference=True)]
    return [
        AgentUnderTest(BASELINE_PATH, baseline, reference=True),
        AgentUnderTest(RESILIENT_PATH, resilient),
    ]


def select(catalog: Iterable[Scenario], only: str | None) -> list[Scenario]:
    """The scenarios whose name matches ``only`` (a regular expression), all if None."""
    pattern = re.compile(only) if only else None
    return [s for s in catalog if pattern is None or pattern.search(s.name)]


def run_lab(
    catalog: Sequence[Scenario],
    agents: Sequence[AgentUnderTest],
    *,
    sweep: bool = False,
    on_result: Callable[[LabResult], None] | None = None,
    on_skip: Callable[[Scenario, AgentUnderTest, str], None] | None = None,
    traces: bool = False,
    stack: str | None = None,
    record: Path | None = None,
) -> list[LabResult]:
    """Run every scenario (every onset of its window with ``sweep``) on every agent.

    A scenario whose app code cannot be built on an agent's ``catalog_cls`` is not run on it;
    ``on_skip`` hears why. With ``traces``, livekit traces every call and each result keeps
    its spans (``LabResult.spans``). With ``stack``, pipeline calls run on that stack's real
    provider plugins against local wire emulators (see
    :data:`~resilient_agent.testing.stacks.STACKS`). With ``record``, every call is written
    there as livekit's session report (:func:`record_path`).
    """
    results: list[LabResult] = []
    with quiet_logs(), contextlib.ExitStack() as exits:
        spans = exits.enter_context(CallTraces()) if traces else None
        _run_all(catalog, agents, sweep, on_result, on_skip, results, spans, stack, record)
    return results


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Livekit and our middleware log every race they run into; the lab reports them itself."""
    with _quiet("livekit.agents"), _quiet("livekit.plugins"), library_logs_silenced():
        yield


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    logger = logging.getLogger(name)
    saved_propagate = logger.propagate
    silent = logging.NullHandler()
    logger.addHandler(silent)
    logger.propagate = False
    try:
        yield
    finally:
        logger.propagate = saved_propagate
        logger.removeHandler(silent)


def _run_all(
    catalog: Sequence[Scenario],
    agents: Sequence[AgentUnderTest],
    sweep: bool,
    on_result: Callable[[LabResult], None] | None,
    on_skip: Callable[[Scenario, AgentUnderTest, str], None] | None,
    results: list[LabResult],
    traces: CallTraces | None,
    stack: str | None = None,
    record: Path | None = None,
) -> None:
    for scenario in catalog:
        runnable = []
        for agent in agents:
            mismatch = None
            if agent.catalog_cls is not None:
                mismatch = scenario_mismatch(scenario, agent.catalog_cls)
            if mismatch is None:
                runnable.append(agent)
            elif on_skip is not None:
                on_skip(scenario, agent, mismatch)
        variants: list[tuple[Scenario, float | None]] = [(scenario, None)]
        written_onset = None
        if sweep and scenario.sweep is not None:
            window = scenario.sweep
            written_onset = scenario.utterances[window.utterance].start
            variants = [
                (scenario.with_onset(window.utterance, onset), onset)
                for onset in window.onsets()
                if _fits(scenario, window.utterance, onset)
            ]
        for variant, onset in variants:
            for agent in runnable:
                report_path = (
                    record_path(record, agent.label, variant, onset) if record is not None else None
                )
                world, outcome = run_scenario(
                    variant,
                    agent.catalog_cls or agent.cls,
                    stack=stack,
                    # livekit's own recorder writes the call's audio beside its report
                    record_audio=report_path.with_suffix(".ogg") if report_path else None,
                )
                if report_path is not None:
                    write_session_report(world, report_path)
                timeline = extract_timeline(
                    world, outcome, agent=agent.path, agent_label=agent.label, onset=onset
                )
                result = LabResult(
                    variant,
                    agent,
                    outcome,
                    onset,
                    world.wall_seconds,
                    world.virtual_seconds,
                    timeline,
                    written_onset,
                    stt=f"{world.stt.provider}:{world.stt.model}",
                    transcripts=tuple(t.as_json() for t in utterance_transcripts(world))
                    if variant.real_speech is not None
                    else (),
                    spans=traces.take(world.t0) if traces is not None else (),
                )
                results.append(result)
                if on_result is not None:
                    on_result(result)


def record_path(root: Path, agent: str, scenario: Scenario, onset: float | None = None) -> Path:
    """Where ``--record`` writes a call's report: ``ROOT/AGENT/FAMILY__VARIANT[@ONSET].json``.

    livekit's recorder writes the call's audio beside it, with the suffix ``.ogg``.
    """
    stem = scenario.name.replace("/", "__") + ("" if onset is None else f"@{onset:g}")
    return root / agent / f"{stem}.json"


def _fits(scenario: Scenario, index: int, onset: float) -> bool:
    try:
        scenario.with_onset(index, onset)
    except ValueError:
        return False
    return True
