"""A fuzzed call as a value: which app, what the caller says and when, and how the VAD fails.

A :class:`CallRecipe` is everything that decides one fuzzed call. It builds the
:class:`~resilient_agent.testing.Scenario` the lab runs and prints it as ready-to-paste Python
(:meth:`CallRecipe.source`), so a failure found by the fuzzer goes into the catalog or a test as
it is. :func:`generate` draws one recipe from ``(seed, index)`` alone.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, TypeVar

from ..testing import LLMRule, Scenario, ToolCallScript, Typed, Utterance, VADFault
from ..testing.vad import SILENCE_TO_END_SPEECH, VADFaultMode
from .catalog import agents

__all__ = ["APPS", "AppKind", "CallRecipe", "generate"]

AppKind = Literal["booking", "cancellable", "announcement", "handoff_hold", "farewell", "filler"]
APPS: tuple[AppKind, ...] = (
    "booking",
    "cancellable",
    "announcement",
    "handoff_hold",
    "farewell",
    "filler",
)
_BOOKING_STYLES = ("plain", "disallow", "protected_say", "disallow_and_say")
_FAULTS: tuple[VADFaultMode, ...] = ("no_end_of_speech", "stuck", "dead")

# The lab's clock (see the catalog): the VAD ends speech 0.55 s after the caller stops, livekit
# commits the turn 0.5 s later, the scripted LLM answers in 0.3-0.5 s, TTS says 15 chars a second.
_TURN_S = SILENCE_TO_END_SPEECH + 0.5
# From the caller's last word until livekit has committed the turn and the LLM has answered it.
_FIRST_TURN_TAKEN_S = _TURN_S + 0.2
_LLM_S = 0.5
_CHARS_PER_S = 15.0
# From the caller's last word until a protected speech the reply starts is heard: the VAD's
# end of speech, the scripted LLM's 0.5 s, the scripted TTS's first audio 0.15 s later.
_PROTECTED_SPEECH_AFTER_S = SILENCE_TO_END_SPEECH + _LLM_S + 0.15
# How often an utterance is moved to a protected speech's start or end (the draw above keeps
# its place in the run's sequence, so the other calls of a seed do not change), and how close:
# within two of the lab's 20 ms frames. How often the pause before it is cut below the VAD's
# end-of-speech silence instead (two utterances, one speech window, two STT finals).
_EDGE_P = 0.25
_EDGE_S = 0.04
_SHORT_PAUSE_P = 0.15
# Words the caller says after the first utterance: distinct, so each lost word can be traced,
# and none of them triggers a scripted tool call.
_VOCABULARY = tuple(
    " ".join(
        (
            "apple river candle garden window orange silver morning purple jacket pencil rocket",
            "forest yellow bridge coffee summer winter blanket mirror guitar ladder pepper violin",
            "tomato island planet anchor button castle dragon empire falcon harbor jungle kettle",
            "lemon marble needle oyster parrot quartz saddle turtle velvet walnut zebra bamboo",
            "cactus dolphin feather glacier hammock igloo jasmine koala lantern meadow",
        )
    ).split()
)
# Factories in the agents module that build the agent themselves (no options).
_FACTORIES_ITSELF = frozenset({"filler_agent", "plain_agent"})
_GENEROUS_REPLY_S = 6.0
"""Beyond the speech the app protects and its tool's work: the fuzzer hunts lost and unanswered
words, and leaves latency to the catalog's tighter bounds."""


@dataclass(frozen=True)
class CallRecipe:
    """Everything that decides one fuzzed call.

    Attributes:
        name: The scenario's name.
        app: Which app answers the call.
        agent_factory: The name of the factory in :mod:`resilient_agent.lab.catalog.agents`.
        agent_kwargs: Its keyword arguments, as ``(name, value)`` pairs.
        llm: The LLM script.
        utterances: What the caller says.
        typed: What the caller types.
        vad_fault: How the VAD fails.
        farewell: The farewell the hang-up contracts judge, if the app says one.
        reply_bound: Seconds from a caller's last word to the start of its answer.
        duration: Seconds of call.
    """

    name: str
    app: AppKind
    agent_factory: str
    agent_kwargs: tuple[tuple[str, Any], ...]
    llm: tuple[LLMRule, ...]
    utterances: tuple[Utterance, ...]
    typed: tuple[Typed, ...] = ()
    vad_fault: VADFault = dataclasses.field(default_factory=VADFault)
    farewell: str | None = None
    reply_bound: float = 10.0
    duration: float = 20.0

    def agent_source(self) -> str:
        """The agent factory call, as Python."""
        if self.agent_factory in _FACTORIES_ITSELF:
            return f"agents.{self.agent_factory}"
        kwargs = ", ".join(f"{k}={v!r}" for k, v in self.agent_kwargs)
        return f"agents.{self.agent_factory}({kwargs})"

    def scenario(self) -> Scenario:
        """The scenario the lab runs."""
        factory = getattr(agents, self.agent_factory)
        if self.agent_factory not in _FACTORIES_ITSELF:
            factory = factory(**dict(self.agent_kwargs))
        return Scenario(
            name=self.name,
            family="fuzz",
            description=f"A fuzzed call: {self.agent_source()}.",
            agent=factory,
            utterances=tuple(_bounded(u, self) for u in self.utterances),
            llm=self.llm,
            vad_fault=self.vad_fault,
            duration=self.duration,
            farewell=self.farewell,
            reply_bound=self.reply_bound,
            typed=tuple(_bounded(t, self) for t in self.typed),
        )

    def source(self) -> str:
        """The scenario as a Python expression.

        It needs the names :meth:`snippet` imports; :meth:`snippet` is the version to paste.
        """
        lines = [
            "Scenario(",
            f"    name={self.name!r},",
            '    family="fuzz",',
            f'    description="A fuzzed call: {self.agent_source()}.",',
            f"    agent={self.agent_source()},",
            "    utterances=(",
            *(f"        {_utterance_source(_bounded(u, self))}," for u in self.utterances),
            "    ),",
        ]
        if self.llm:
            lines += ["    llm=(", *(f"        {rule!r}," for rule in self.llm), "    ),"]
        if self.typed:
            typed = tuple(_bounded(t, self) for t in self.typed)
            lines.append(f"    typed={typed!r},")
        if self.vad_fault.mode != "healthy":
            lines.append(f"    vad_fault={self.vad_fault!r},")
        if self.farewell is not None:
            lines.append(f"    farewell={self.farewell!r},")
        lines += [
            f"    reply_bound={self.reply_bound!r},",
            f"    duration={self.duration!r},",
            ")",
        ]
        return "\n".join(lines)

    def snippet(self, agent_path: str | None = None, schedule: str | None = None) -> str:
        """The scenario as complete, ready-to-paste Python: its imports, then ``scenario = ...``.

        With ``agent_path`` (``module:Class``, a class the scenario's app code can subclass as it
        is), the snippet goes on to run the scenario on that class and assert it passed: pasted
        into a test, it fails with the broken contracts until the race is fixed. With
        ``schedule`` (a ``--schedule`` token), the run follows that delivery schedule, judged as
        the explorer judges.
        """
        expression = self.source()
        used = sorted(set(_TESTING_NAMES.findall(expression)))
        lines = ["from resilient_agent.lab.catalog import agents"]
        run: list[str] = []
        if agent_path is not None:
            module, _, cls = agent_path.partition(":")
            used.append("run_scenario")
            lines.insert(0, f"from {module} import {cls}")
            run = [
                f"world, outcome = run_scenario(scenario, {cls})",
                "assert outcome.passed, outcome.reasons",
            ]
            if schedule is not None:
                lines += [
                    "from resilient_agent.lab.explore import with_jitter_slack",
                    "from resilient_agent.testing.schedule import Schedule, explored",
                ]
                run = [
                    f"with explored(Schedule.parse({schedule!r})):",
                    f"    world, outcome = run_scenario(with_jitter_slack(scenario), {cls})",
                    "assert outcome.passed, outcome.reasons",
                ]
        lines.append(f"from resilient_agent.testing import {', '.join(used)}")
        return "\n".join([*sorted(lines), "", f"scenario = {expression}", *run])

    def fitted(self) -> CallRecipe:
        """The same call, its length fitted to what the caller does (used after shrinking)."""
        return dataclasses.replace(self, duration=_duration(self))


# The names of resilient_agent.testing a printed scenario calls.
_TESTING_NAMES = re.compile(r"\b(Scenario|Utterance|Typed|LLMRule|ToolCallScript|VADFault)\(")

_Input = TypeVar("_Input", Utterance, Typed)


def _bounded(said: _Input, recipe: CallRecipe) -> _Input:
    """``said`` with its answer bounded from the caller's last word, not from its own end.

    A caller who goes on talking delays every answer to what they said before (livekit answers
    the whole turn, or the reply is interrupted and asked again): what a caller can expect is an
    answer within ``reply_bound`` once they stop.
    """
    if not said.expect_reply:
        return said
    last = max([u.end for u in recipe.utterances] + [t.at for t in recipe.typed])
    return dataclasses.replace(said, reply_within=_r(last - said.end + recipe.reply_bound))


def _utterance_source(u: Utterance) -> str:
    extra = "" if u.expect_reply else ", expect_reply=False"
    if u.reply_within is not None:
        extra += f", reply_within={u.reply_within!r}"
    return f"Utterance({u.start!r}, {u.end!r}, {u.text!r}{extra})"


# -- generation --------------------------------------------------------------------------------


def generate(seed: int, index: int) -> CallRecipe:
    """The ``index``-th call of the run seeded ``seed``: a pure function of both."""
    rng = random.Random(f"resilient-agent-fuzz:{seed}:{index}")
    app = rng.choice(APPS)
    build = _BUILDERS[app]
    recipe = build(rng, f"fuzz/{seed}-{index}")
    if rng.random() < 0.15:
        recipe = _with_typed(rng, recipe)
    # a VAD that never ends a turn the app answers without a reply (a transfer, a goodbye) makes
    # whatever the caller says next part of that turn: no fault there
    faultable = [i for i, u in enumerate(recipe.utterances) if i > 0 or u.expect_reply]
    if rng.random() < 0.12 and faultable:
        target = rng.choice(faultable)
        mode: VADFaultMode = rng.choice(_FAULTS)
        recipe = dataclasses.replace(recipe, vad_fault=VADFault(mode=mode, utterance=target))
    return recipe.fitted()


def _r(value: float) -> float:
    return round(value, 2)


class _Caller:
    """Draws the caller's utterances, dense around the windows races live in."""

    def __init__(
        self,
        rng: random.Random,
        first: Utterance,
        *,
        edges: tuple[float, ...] = (),
        edge_rng: random.Random | None = None,
    ) -> None:
        self.rng = rng
        # a protected speech's estimated start and end, drawn from a stream of their own
        self.edges = edges
        self.edge_rng = edge_rng
        self.said = [first]
        # words said before a turn that gets no reply of its own (a transfer request) has been
        # committed are part of that turn: the caller waits for it to be taken
        self.not_before = 0.0 if first.expect_reply else first.end + _FIRST_TURN_TAKEN_S
        self.words = list(_VOCABULARY)
        rng.shuffle(self.words)

    def onset(self, anchors: list[float]) -> float:
        """When the next utterance starts.

        Just over the end-of-speech silence after the last one, near a race window, or anywhere
        in the next few seconds.
        """
        rng = self.rng
        after = self.said[-1].end
        roll = rng.random()
        if roll < 0.4:
            return after + rng.uniform(SILENCE_TO_END_SPEECH - 0.05, SILENCE_TO_END_SPEECH + 0.3)
        if roll < 0.85 and anchors:
            return rng.choice(anchors) + rng.uniform(-0.8, 0.8)
        return after + rng.uniform(0.1, 4.0)

    def say(self, anchors: list[float]) -> None:
        rng = self.rng
        start = self.edge_onset(self.onset(anchors))
        start = max(start, self.said[-1].end + 0.05, self.not_before)
        length = rng.uniform(0.4, 2.5)
        count = max(1, min(len(self.words), round(length * 2.2)))
        text = " ".join(self.words.pop() for _ in range(count))
        self.said.append(Utterance(_r(start), _r(start + length), text))

    def edge_onset(self, drawn: float) -> float:
        """``drawn``, or a start the windows of a protected speech's first and last frames need.

        The words of a caller who starts a frame or two before a protected speech starts are
        partly heard, partly withheld; one who starts at its end is withheld, then heard; a
        pause shorter than the VAD's end-of-speech silence makes two finals of one window.
        """
        edge_rng = self.edge_rng
        if edge_rng is None:
            return drawn
        roll = edge_rng.random()
        if roll < _EDGE_P and self.edges:
            return edge_rng.choice(self.edges) + edge_rng.uniform(-_EDGE_S, _EDGE_S)
        if roll < _EDGE_P + _SHORT_PAUSE_P:
            return self.said[-1].end + edge_rng.uniform(0.05, SILENCE_TO_END_SPEECH - 0.1)
        return drawn

    def utterances(self, anchors: list[float]) -> tuple[Utterance, ...]:
        for _ in range(self.rng.randint(1, 3)):
            if len(self.words) < 8:
                break
            self.say(anchors)
        return tuple(self.said)


def _ask(rng: random.Random, text: str, *, expect_reply: bool = True) -> Utterance:
    end = 1.0 + rng.uniform(1.0, 2.4)
    return Utterance(1.0, _r(end), text, expect_reply=expect_reply)


def _booking(rng: random.Random, name: str) -> CallRecipe:
    style = rng.choice(_BOOKING_STYLES)
    work = _r(rng.uniform(0.5, 8.0))
    preamble = rng.random() < 0.35
    ask = _ask(rng, "please book a table for eight")
    tool_start = ask.end + _TURN_S + _LLM_S
    hold = len(agents.HOLD_MESSAGE) / _CHARS_PER_S if "say" in style else 0.0
    tool_end = tool_start + work + hold
    anchors = [ask.end, tool_start, tool_start + 0.2, tool_start + hold, tool_end, tool_end + 0.4]
    edges = _booking_edges(ask.end, style, preamble=preamble, hold=hold)
    book = LLMRule(
        text="Let me check the reservation book for you right now." if preamble else "",
        when_user_says="book",
        tool_calls=(ToolCallScript("book_table", {"time": "eight"}),),
    )
    return CallRecipe(
        name=name,
        app="booking",
        agent_factory="booking_agent",
        agent_kwargs=(("style", style), ("work_seconds", work)),
        llm=(book, LLMRule(text="Your table is booked.", after_tool="book_table")),
        utterances=_Caller(rng, ask, edges=edges, edge_rng=_edge_rng(name)).utterances(anchors),
        reply_bound=_r(_GENEROUS_REPLY_S + work + hold),
    )


def _edge_rng(name: str) -> random.Random:
    return random.Random(f"resilient-agent-fuzz-edges:{name}")


def _booking_edges(
    asked_until: float, style: str, *, preamble: bool, hold: float
) -> tuple[float, ...]:
    """When the booking's protected speeches are estimated to start and end (lab clock)."""
    start = asked_until + _PROTECTED_SPEECH_AFTER_S
    edges: list[float] = []
    if preamble:
        said = len("Let me check the reservation book for you right now.") / _CHARS_PER_S
        if style.startswith("disallow"):  # the tool protects the speech it runs in
            edges += [start, start + said]
        start += said + 0.15  # the hold message is queued behind it
    if hold:
        edges += [start, start + hold]
    return tuple(edges)


def _cancellable(rng: random.Random, name: str) -> CallRecipe:
    work = _r(rng.uniform(0.5, 8.0))
    ask = _ask(rng, "is a table available tonight")
    tool_start = ask.end + _TURN_S + _LLM_S
    anchors = [ask.end, tool_start, tool_start + work, tool_start + work + 0.4]
    return CallRecipe(
        name=name,
        app="cancellable",
        agent_factory="availability_agent",
        agent_kwargs=(("work_seconds", work),),
        llm=(
            LLMRule(when_user_says="available", tool_calls=(ToolCallScript("check_availability"),)),
            LLMRule(text="We have tables free at eight.", after_tool="check_availability"),
        ),
        utterances=_Caller(rng, ask).utterances(anchors),
        reply_bound=_r(_GENEROUS_REPLY_S + work),
    )


_NOTICE = "This call is recorded for quality and training purposes, thank you for waiting."


def _announcement(rng: random.Random, name: str) -> CallRecipe:
    protected = rng.random() < 0.7
    text = _NOTICE if rng.random() < 0.7 else "Hello, how can I help?"
    length = len(text) / _CHARS_PER_S
    start = _r(rng.uniform(0.3, length + 1.0))
    caller = _Caller(
        rng,
        Utterance(start, _r(start + rng.uniform(0.6, 2.4)), "hello there"),
        edges=(0.15, 0.15 + length) if protected else (),
        edge_rng=_edge_rng(name),
    )
    anchors = [0.2, length, length + 0.3, length - 0.5]
    return CallRecipe(
        name=name,
        app="announcement",
        agent_factory="greeting_agent",
        agent_kwargs=(("protected", protected), ("text", text)),
        llm=(),
        utterances=caller.utterances(anchors),
        reply_bound=_r(_GENEROUS_REPLY_S + length),
    )


def _handoff_hold(rng: random.Random, name: str) -> CallRecipe:
    delay = _r(rng.uniform(0.3, 3.0))
    ask = _ask(rng, "let me talk to the manager", expect_reply=False)
    message_start = ask.end + _TURN_S + _LLM_S
    length = len(agents.TRANSFER_MESSAGE) / _CHARS_PER_S
    anchors = [message_start, message_start + delay, message_start + length / 2]
    anchors.append(message_start + length)
    return CallRecipe(
        name=name,
        app="handoff_hold",
        agent_factory="protected_handoff_agent",
        agent_kwargs=(("delay_s", delay),),
        llm=(
            LLMRule(when_user_says="manager", tool_calls=(ToolCallScript("transfer_to_manager"),)),
        ),
        utterances=_Caller(rng, ask).utterances(anchors),
        reply_bound=_r(_GENEROUS_REPLY_S + length),
    )


def _farewell(rng: random.Random, name: str) -> CallRecipe:
    protected = rng.random() < 0.5
    shutdown = rng.choice(("job", "session"))
    goodbye = _ask(rng, "okay goodbye", expect_reply=False)
    farewell_start = goodbye.end + _FIRST_TURN_TAKEN_S + 0.2
    length = len(agents.FAREWELL) / _CHARS_PER_S
    said = [goodbye]
    if rng.random() < 0.6:
        # a question over the farewell, before the app hangs up (a question after the call
        # ended is never heard; one before the farewell began is a matter of definition)
        start = farewell_start + rng.uniform(0.0, length + 1.0)
        said.append(
            Utterance(_r(start), _r(start + rng.uniform(0.8, 2.0)), "wait when do you open")
        )
    return CallRecipe(
        name=name,
        app="farewell",
        agent_factory="end_call_agent",
        agent_kwargs=(("farewell_protected", protected), ("shutdown", shutdown)),
        llm=(LLMRule(when_user_says="goodbye", tool_calls=(ToolCallScript("end_call"),)),),
        utterances=tuple(said),
        farewell=agents.FAREWELL,
        reply_bound=_r(_GENEROUS_REPLY_S + length),
    )


def _filler(rng: random.Random, name: str) -> CallRecipe:
    ask = _ask(rng, "what is on the menu")
    filler_start = ask.end + _TURN_S
    length = len(agents.FILLER) / _CHARS_PER_S
    anchors = [filler_start, filler_start + length, filler_start + length + 0.5]
    return CallRecipe(
        name=name,
        app="filler",
        agent_factory="filler_agent",
        agent_kwargs=(),
        llm=(),
        utterances=_Caller(rng, ask).utterances(anchors),
        reply_bound=_r(_GENEROUS_REPLY_S + length),
    )


def _with_typed(rng: random.Random, recipe: CallRecipe) -> CallRecipe:
    # after the first turn was taken: it may be a goodbye or a transfer the app acts on
    first = recipe.utterances[0].end + _FIRST_TURN_TAKEN_S
    at = _r(rng.uniform(first, recipe.utterances[-1].end + 2.0))
    return dataclasses.replace(recipe, typed=(Typed(at, "any quiet corner seats"),))


def _duration(recipe: CallRecipe) -> float:
    inputs = [u.end for u in recipe.utterances] + [t.at for t in recipe.typed]
    work = sum(v for k, v in recipe.agent_kwargs if isinstance(v, float) and k != "delay_s")
    return _r(max(inputs, default=1.0) + work + recipe.reply_bound + 4.0)


_BUILDERS: Mapping[str, Callable[[random.Random, str], CallRecipe]] = MappingProxyType(
    {
        "booking": _booking,
        "cancellable": _cancellable,
        "announcement": _announcement,
        "handoff_hold": _handoff_hold,
        "farewell": _farewell,
        "filler": _filler,
    }
)
