"""Races on an app's own tools: the caller speaks across each window of each tool it calls.

For every function tool of the app's agent (see :mod:`.app_tools`) the lab first runs a probe:
a race-free call in which the caller asks, the scripted LLM calls the tool, and nobody speaks
over anything. The probe's timeline says where the tool's windows are on this app: the gap
between the LLM's tool call and the tool running, the speech the tool makes, its business
logic, the reply after it, or, when the call ends after the tool (an end-call tool), the
goodbye and the moment right after it. Each window then gets a scenario in which the caller
starts a question there, judged by the catalog's contracts: the question reaches the LLM and is
answered, nothing is played over the caller, and the call is not hung up on them.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from livekit.agents import Agent

from ...testing import LLMRule, Scenario, ToolCallScript, Utterance, run_scenario
from ...testing.redirect import has_own_plugins
from ..app_agent import catalog_base
from ..app_tools import AppTool, ToolMocks, app_tools, load_mocks
from ..run import AgentUnderTest, LabResult, load_agent_class, quiet_logs, run_lab
from ..timeline import CallTimeline, extract_timeline

__all__ = [
    "WINDOW_NAMES",
    "ToolWindows",
    "app_tool_scenarios",
    "build_app_agent",
    "own_tool_scenario",
    "probe_tool",
    "question_scenario",
    "question_span",
    "race_own_tools",
    "tool_windows",
]

FAMILY = "app_tool"
_ASK = Utterance(1.0, 2.4, "yes please go ahead with that")
_QUESTION = "wait actually how long does a refund take"
_QUESTION_S = 1.9
_ANSWER = LLMRule(when_user_says="refund", text="A refund takes five working days.")
_AFTER_TOOL = "That is all done for you."
# the VAD ends the caller's turn 0.55 s after they stop; a reply comes within 1.5 times the
# lab's race-free latency (1.2 s) after that, or after the protected speech the app asked for
_TURN_END_S = 0.55
_REPLY_S = 1.5 * 1.2
# where in a window the caller starts: far enough in to be inside it, early enough to straddle
_INTO_WINDOW_S = 0.4
# the shortest business logic (a stretch of a tool's run with nothing playing) worth a scenario
_MIN_WORK_S = 1.0
_PROBE_S = 30.0


def build_app_agent(cls: type[Agent]) -> Agent:
    """The app's agent as the app builds it; a class that needs ``instructions`` gets one."""
    parameters = inspect.signature(cls.__init__).parameters
    parameter = parameters.get("instructions")
    # a class that passes its keyword arguments on (ResilientAgent itself) takes livekit's
    # required instructions there, as the catalog builds it (catalog_base)
    passes_on = parameter is None and any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )
    if passes_on or (parameter is not None and parameter.default is inspect.Parameter.empty):
        return cls(instructions="You are the app under test.")
    # checked by catalog_base: every other parameter has a default
    build: Any = cls
    agent: Agent = build()
    return agent


@dataclass(frozen=True)
class ToolWindows:
    """Where one tool's race windows are on this app, from its probe call.

    Attributes:
        tool: The tool.
        ran: Whether the probe's LLM call reached the tool and it ran.
        status: How the tool ended in the probe (``done``, ``error``...), None if it never did.
        onsets: Window name to the caller's onset (call seconds) inside it.
        ends_call: Whether the call ended after the tool: an end-call tool.
        farewell: The last speech heard to the end before the call ended, for the hang-up
            contract.
        held_s: The longest speech the app protected in the probe.
        probe_end: Call seconds the probe's last activity ended.
    """

    tool: AppTool
    ran: bool
    status: str | None
    onsets: dict[str, float]
    ends_call: bool
    farewell: str | None
    held_s: float
    probe_end: float


def _rules(tool: AppTool) -> tuple[LLMRule, ...]:
    return (
        # first: a question merged with the request is answered as a question
        _ANSWER,
        LLMRule(
            when_user_says="please",
            tool_calls=(ToolCallScript(tool.name, dict(tool.arguments)),),
        ),
        LLMRule(after_tool=tool.name, text=_AFTER_TOOL),
    )


def _scenario(
    tool: AppTool,
    mocks: ToolMocks,
    *,
    name: str,
    description: str,
    utterances: tuple[Utterance, ...],
    duration: float,
    farewell: str | None = None,
) -> Scenario:
    return Scenario(
        name=name,
        family=FAMILY,
        description=description,
        agent=lambda base: build_app_agent(base),
        utterances=utterances,
        llm=_rules(tool),
        duration=duration,
        farewell=farewell,
        tool_mocks={n: m for n, m in mocks.mocks.items() if n == tool.name},
        # the mock answers what it returns for the arguments the LLM sends, in every call
        tool_outputs={} if tool.mock_output is None else {tool.name: tool.mock_output},
    )


def probe_tool(
    cls: type[Agent], tool: AppTool, mocks: ToolMocks, stack: str | None = None
) -> ToolWindows:
    """Run the race-free call of ``tool`` on ``cls`` and read its windows off the timeline.

    Args:
        cls: The app's agent class.
        tool: The tool probed.
        mocks: The app's mocks.
        stack: Probe on this stack of real plugins (an agent with plugins of its own).
    """
    ask = Utterance(_ASK.start, _ASK.end, _ASK.text, reply_within=_PROBE_S)
    probe = _scenario(
        tool,
        mocks,
        name=f"{FAMILY}/{tool.name}/probe",
        description="probe",
        utterances=(ask,),
        duration=_PROBE_S,
    )
    world, outcome = run_scenario(probe, cls, stack=stack)
    timeline = extract_timeline(world, outcome, agent=cls.__name__, agent_label=cls.__name__)
    return _windows(tool, timeline)


def tool_windows(
    cls: type[Agent], mocks: ToolMocks | None = None, *, stack: str | None = None
) -> list[ToolWindows]:
    """Every function tool of ``cls``, probed: where each one's windows are.

    With ``stack``, an agent that carries its own STT, LLM or TTS is probed on the stack, its
    instances redirected to the emulators: on the lab's scripted providers they would be the
    ones livekit uses, and reach the real providers. Any other agent is probed as without.

    Raises:
        MockFileError: ``mocks`` names a tool ``cls`` does not have, or gives arguments its
            schema rejects.
    """
    given = mocks or ToolMocks()
    agent = build_app_agent(cls)
    probe_stack = stack if stack is not None and has_own_plugins(agent) else None
    with quiet_logs():
        return [probe_tool(cls, tool, given, probe_stack) for tool in app_tools(agent, given)]


def race_own_tools(
    cls: type[Agent], mocks: ToolMocks | None = None, *, stack: str | None = None
) -> list[LabResult]:
    """Run what ``resilient-agent lab --agent`` runs on an app's own tools, for a test.

    Every window of every tool of ``cls`` gets a call in which the caller asks a question
    there; each result's ``outcome.reasons`` says what broke::

        results = race_own_tools(Assistant)
        assert results and all(r.outcome.passed for r in results)

    Args:
        cls: The app's agent class, built with no arguments (or only ``instructions``).
        mocks: Mocks for the tools with side effects, and arguments per tool.
        stack: Race them on this stack of real provider plugins against local wire
            emulators (see :data:`~resilient_agent.testing.stacks.STACKS`).
    """
    given = mocks or ToolMocks()
    scenarios = app_tool_scenarios(tool_windows(cls, given, stack=stack), given)
    agent = AgentUnderTest(f"{cls.__module__}:{cls.__qualname__}", cls)
    return run_lab(scenarios, [agent], stack=stack)


def _windows(tool: AppTool, timeline: CallTimeline) -> ToolWindows:
    runs = [t for t in timeline.tools if t.name == tool.name]
    requests = [r for r in timeline.llm_requests if tool.name in r.tool_calls]
    if not runs or not requests:
        return ToolWindows(tool, False, None, {}, False, None, 0.0, timeline.activity_end)
    run, request = runs[0], requests[0]
    ended = run.end if run.end is not None else timeline.activity_end
    onsets: dict[str, float] = {"gap": round(request.at + _INTO_WINDOW_S * request.duration_s, 2)}
    playouts = sorted(
        ((p, s) for s in timeline.speeches for p in s.playouts), key=lambda ps: ps[0].start
    )
    during = [p for p, _ in playouts if run.start <= p.start < ended]
    if during:
        onsets["speech"] = round(during[0].start + _INTO_WINDOW_S, 2)
    work_start = max([run.start, *(p.end or ended for p in during)])
    if ended - work_start >= _MIN_WORK_S:
        onsets["work"] = round(work_start + _INTO_WINDOW_S, 2)
    after = [p for p, _ in playouts if p.start >= ended]
    ends_call = timeline.hung_up
    heard = [(p, s) for p, s in playouts if not p.interrupted and p.end is not None]
    farewell = heard[-1][1].text if ends_call and heard else None
    if after:
        onsets["goodbye" if ends_call else "reply"] = round(after[0].start + _INTO_WINDOW_S, 2)
    if ends_call and heard:
        last_end = heard[-1][0].end
        assert last_end is not None
        onsets["after_goodbye"] = round(last_end + 0.1, 2)
    held = [
        p.end - p.start
        for s in timeline.speeches
        if s.protected_at_creation
        for p in s.playouts
        if p.end is not None
    ]
    return ToolWindows(
        tool,
        True,
        run.status,
        onsets,
        ends_call,
        farewell,
        max(held, default=0.0),
        timeline.activity_end,
    )


_WINDOW_WORDS: Mapping[str, str] = MappingProxyType(
    {
        "gap": "in the gap between the LLM's call of {tool} and the tool running",
        "speech": "over the speech {tool} makes",
        "work": "during {tool}'s business logic, after its speech",
        "reply": "over the reply after {tool}",
        "goodbye": "over the goodbye after {tool}",
        "after_goodbye": "right after the goodbye of {tool}, before the call ends",
    }
)


def question_scenario(
    window: ToolWindows,
    mocks: ToolMocks,
    *,
    name: str,
    description: str,
    onset: float,
    question_s: float = _QUESTION_S,
) -> Scenario:
    """The caller asks for ``window``'s tool, then asks a question at ``onset``.

    Raises:
        ValueError: The question would start while the caller is still asking.
    """
    if onset < _ASK.end + 0.1:
        raise ValueError(f"onset={onset}: the caller is still asking until {_ASK.end}s")
    tool = window.tool
    bound = max(3.0, _TURN_END_S + window.held_s + _REPLY_S)
    question = Utterance(onset, onset + question_s, _QUESTION, reply_within=bound)
    ask = Utterance(
        _ASK.start,
        _ASK.end,
        _ASK.text,
        expect_reply=not window.ends_call,
        reply_within=window.probe_end - _ASK.end + bound,
    )
    return _scenario(
        tool,
        mocks,
        name=name,
        description=description,
        utterances=(ask, question),
        duration=max(window.probe_end, question.end) + 12.0,
        farewell=window.farewell,
    )


def question_span(window: ToolWindows) -> tuple[float, float]:
    """The earliest and latest onsets of a question on ``window``'s tool that the agent can take.

    From just after the caller's request to the end of the probe's activity; for a tool that
    ends the call, to just after its goodbye (later, the call is over).
    """
    latest = window.onsets.get("after_goodbye", window.probe_end + 0.5)
    return _ASK.end + 0.1, latest


WINDOW_NAMES = tuple(_WINDOW_WORDS)
"""Every window a tool may get a scenario in (``app_tool/<tool>/<window>``)."""


def app_tool_scenarios(windows: Sequence[ToolWindows], mocks: ToolMocks) -> list[Scenario]:
    """A scenario per window of every tool that ran in its probe."""
    found = []
    for window in windows:
        if not window.ran:
            continue
        tool = window.tool
        for name, onset in window.onsets.items():
            if onset < question_span(window)[0]:
                continue  # the caller would still be asking
            found.append(
                question_scenario(
                    window,
                    mocks,
                    name=f"{FAMILY}/{tool.name}/{name}",
                    description=(
                        f"Your tool {tool.name}: the caller asks a question "
                        + _WINDOW_WORDS[name].format(tool=tool.name)
                        + "."
                    ),
                    onset=onset,
                )
            )
    return found


def own_tool_scenario(
    agent: str,
    tool: str,
    *,
    onset: float,
    question_s: float = _QUESTION_S,
    mock: str | None = None,
) -> tuple[Scenario, type[Agent]]:
    """One call on an app's own tool, as the fuzzer prints it to paste and run.

    ``agent`` is imported as ``--agent`` imports it, the tool is probed, and the caller asks a
    question at ``onset``::

        scenario, cls = own_tool_scenario("shop:Shop", "hold_parcel", onset=4.37)
        world, outcome = run_scenario(scenario, cls)

    Args:
        agent: ``module:Class``, importable from the current directory.
        tool: The tool's name.
        onset: Call seconds the question starts.
        question_s: How long the question lasts.
        mock: The ``--mock`` file, if the app's tools need one.

    Returns:
        The scenario and the class to run it on.
    """
    cls = catalog_base(load_agent_class(agent)).cls
    mocks = load_mocks(Path(mock)) if mock is not None else ToolMocks()
    window = next((w for w in tool_windows(cls, mocks) if w.tool.name == tool), None)
    if window is None or not window.ran:
        raise ValueError(f"{agent} has no tool {tool!r} its probe call could run")
    scenario = question_scenario(
        window,
        mocks,
        name=f"{FAMILY}/{tool}/at_{onset:g}s",
        description=f"Your tool {tool}: the caller asks a question at {onset:g}s.",
        onset=onset,
        question_s=question_s,
    )
    return scenario, cls


def describe(windows: Sequence[ToolWindows]) -> list[str]:
    """One line per tool: its windows, or why it got none."""
    lines = []
    for window in windows:
        mocked = " (mocked)" if window.tool.mocked else ""
        call = f"{window.tool.name}({_arguments(window.tool.arguments)}){mocked}"
        if not window.ran:
            lines.append(
                f"tool {call}: the probe's LLM call never ran it, so no window can be raced"
            )
            continue
        kind = ", ends the call" if window.ends_call else ""
        spans = ", ".join(f"{n} @{t:.2f}s" for n, t in window.onsets.items())
        status = f", ended {window.status}" if window.status and window.status != "done" else ""
        lines.append(f"tool {call}{kind}{status}: windows {spans}")
    return lines


def _arguments(arguments: dict[str, Any] | Any) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in dict(arguments).items())
