"""Drop-in fidelity: one race-free call on two agent base classes, compared trace by trace.

Where no race is being fixed, ``ResilientAgent`` must behave exactly like ``livekit.agents.Agent``.
:func:`call_trace` turns a lab call into everything a caller, an app or an operator can observe
(state changes with their times, conversation items, speech handles, tool runs and what the LLM got
back from them, session events, livekit's warnings and errors, the session's audio input object,
and any race the agent reported), and :func:`run_differential` runs the same call on both bases
and lists every difference::

    from livekit.agents import Agent
    from resilient_agent import ResilientAgent
    from resilient_agent.testing.differential import run_differential

    result = run_differential(my_race_free_scenario, Agent, ResilientAgent)
    assert not result.differences, result.report()

:func:`race_free_call` draws seeded race-free calls: the caller speaks only while the agent is
silent, so any difference is a divergence, never a race being fixed.
"""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import dataclass, field
from typing import Any

from livekit.agents import Agent, RunContext, function_tool

from .audio import CallerLine
from .clock import SAME_INSTANT_S, run_virtual
from .llm import LLMRule, ToolCallScript
from .runner import CallWorld, run_scenario_async
from .scenario import AgentFactory, Scenario, Utterance

__all__ = [
    "CallTrace",
    "DifferentialResult",
    "PaymentDeclinedError",
    "call_trace",
    "compare_traces",
    "race_free_call",
    "run_differential",
    "tool_agent",
]

CallTrace = dict[str, list[tuple[Any, ...]]]
"""Each observable of a call, by category, in event order."""

# Virtual time is exact, but each clock read inside one loop tick is nudged by a microsecond (so
# items created in one tick keep their order): extra reads by middleware shift times by a few
# microseconds. Times closer than a millisecond are the same instant.
_DIGITS = 6
_SPEECH_ID = re.compile(r"speech_[A-Za-z0-9]+")
# the scripted LLM's tool call ids (``utils.shortuuid("call_")``), which a context summarized
# as text (TaskGroup's summary of its tasks) carries into a user message
_CALL_ID = re.compile(r"call_[A-Za-z0-9]{12}")


def _t(value: float | None) -> float | None:
    return None if value is None else round(value, _DIGITS)


def call_trace(world: CallWorld) -> CallTrace:
    """Everything observable about one lab call, with random ids replaced by creation order."""
    rec = world.recorder
    names = {speech_id: f"speech#{n}" for n, speech_id in enumerate(rec.speeches)}

    def name(speech_id: str | None) -> str | None:
        return None if speech_id is None else names.get(speech_id, "speech#?")

    def text(message: str) -> str:
        return _SPEECH_ID.sub(lambda m: name(m.group(0)) or "", message)

    calls: dict[str, str] = {}

    def call_ids(message: str) -> str:
        return _CALL_ID.sub(lambda m: calls.setdefault(m.group(0), f"call#{len(calls)}"), message)

    return {
        "user_state": [(_t(at), state) for at, state in rec.user_states],
        "agent_state": [(_t(at), state) for at, state in rec.agent_states],
        "transcripts": [(_t(at), words, final) for at, words, final in rec.transcripts],
        "items": [(_t(at), role, words) for at, role, words in rec.items],
        "speeches": [
            (
                name(s.id),
                _t(s.created_at),
                s.source,
                s.allow_interruptions,
                _t(s.scheduled_at),
                _t(s.interrupted_at),
                _t(s.done_at),
                s.interrupted,
                s.allow_interruptions_when_done,
            )
            for s in rec.speeches.values()
        ],
        "playouts": [(_t(p.at), name(p.speech_id), p.allow_interruptions) for p in rec.playouts],
        "heard": [
            (_t(seg.started_at), _t(seg.ended_at), _t(seg.played), seg.interrupted)
            for seg in world.audio_out.segments
        ],
        "tool_runs": [
            (_t(r.started_at), r.name, r.arguments, _t(r.ended_at), r.status) for r in rec.tool_runs
        ],
        "tool_outputs": [
            (_t(at), tool, output, is_error) for at, tool, output, is_error in rec.tool_outputs
        ],
        "llm_requests": [
            (
                _t(r.at - world.t0),
                tuple(call_ids(t) for t in r.user_texts),
                r.last_tool,
                r.reply,
                r.tool_calls,
                r.hung,
            )
            for r in world.llm.requests
        ],
        # what a real provider would have rejected (the strict fake did): empty on a sound call
        "malformed_contexts": [
            (_t(r.at - world.t0), r.malformed) for r in world.llm.requests if r.malformed
        ],
        "session_events": [(_t(at), kind, text(info)) for at, kind, info in rec.session_events],
        "livekit_logs": [(_t(at), level, text(msg)) for at, level, msg in world.logs.records],
        "input_audio_kept": [(_t(at), kept) for at, kept in rec.input_audio_kept],
        "hang_ups": [(_t(at), reason) for at, reason in world.job.shutdowns],
        # the races the agent reported handling: none may happen in a race-free call (the app's
        # own hang-up, carried out as asked, is not an intervention)
        "interventions": [
            (r["at_s"], r["event"], r["kind"], r.get("action"))
            for r in world.race_events
            if (r["kind"], r.get("action")) != ("shutdown_request", "hung_up")
        ],
        "end": [
            (
                world.end_user_state,
                len(world.unfinished_handles),
                world.closed_by_app,
                world.close_deadlocked,
            )
        ],
    }


def compare_traces(expected: CallTrace, actual: CallTrace) -> list[str]:
    """One line per category that differs, naming the first entry where it does."""
    differences = []
    for category in expected.keys() | actual.keys():
        want, got = expected.get(category, []), actual.get(category, [])
        if _same(want, got):
            continue
        index = next(
            (i for i, (w, g) in enumerate(zip(want, got, strict=False)) if not _same(w, g)),
            min(len(want), len(got)),
        )
        first_want = want[index] if index < len(want) else "(nothing)"
        first_got = got[index] if index < len(got) else "(nothing)"
        differences.append(
            f"{category}[{index}]: expected {first_want}, got {first_got} "
            f"({len(want)} vs {len(got)} entries)"
        )
    return sorted(differences)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) < SAME_INSTANT_S
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@dataclass
class DifferentialResult:
    """The same call on two base classes.

    Attributes:
        scenario: The call.
        expected: The trace on the reference base (a plain ``Agent``).
        actual: The trace on the base under test.
        differences: Every category that differs, with its first difference.
    """

    scenario: Scenario
    expected: CallTrace
    actual: CallTrace
    differences: list[str] = field(default_factory=list)

    def report(self) -> str:
        """The differences, one per line, under the scenario's name."""
        lines = [f"{self.scenario.name}: {len(self.differences)} difference(s)"]
        lines.extend(f"  {d}" for d in self.differences)
        return "\n".join(lines)


def run_differential(
    scenario: Scenario, reference: type[Agent], candidate: type[Agent]
) -> DifferentialResult:
    """Run ``scenario`` on both base classes, each on a fresh virtual-time loop, and compare."""
    expected = call_trace(run_virtual(run_scenario_async(scenario, reference)))
    actual = call_trace(run_virtual(run_scenario_async(scenario, candidate)))
    differences = compare_traces(expected, actual)
    # a malformed context is a defect on either base, diverging or not (on ResilientAgent the
    # ContextIntegrity middleware repairs one before the LLM gets it)
    for base, trace in ((reference, expected), (candidate, actual)):
        differences.extend(
            f"malformed_contexts on {base.__name__}: {at}s {why}"
            for at, why in trace["malformed_contexts"]
        )
    return DifferentialResult(scenario, expected, actual, differences)


_CHARGING = "Charging your card now."


class PaymentDeclinedError(Exception):
    """What a payment provider's client raises: an unexpected exception in a tool."""


def tool_agent(*, work_seconds: float, fails: bool) -> AgentFactory:
    """An agent with a ``charge_card`` tool that works a while, then returns or raises."""

    def build(base: type[Agent]) -> Agent:
        class PaymentAgent(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="You take payments. Keep answers short.")

            @function_tool
            async def charge_card(self, ctx: RunContext[None], amount: str) -> str:
                """Charge the caller's card on file.

                Args:
                    amount: How much to charge.
                """
                if work_seconds > 1:
                    await ctx.session.say(_CHARGING)
                await asyncio.sleep(work_seconds)  # the payment provider
                if fails:
                    raise PaymentDeclinedError("card 4242 declined: insufficient funds")
                return f"Charged {amount}."

        return PaymentAgent()

    return build


# fmt: off
_WORDS = (
    "table", "terrace", "window", "garden", "dinner", "lunch", "menu", "wine", "dessert",
    "parking", "birthday", "quiet", "corner", "booth", "vegan", "gluten", "allergy", "children",
    "highchair", "tonight", "tomorrow", "friday", "saturday", "seven", "eight", "nine", "ten",
    "people", "guests", "family", "friends", "music", "jazz", "patio", "heater", "blanket",
    "view",
)
# fmt: on
_LINES: tuple[CallerLine, ...] = ("marked", "marked", "quiet", "zeros")
# Seconds of agent speech per character (the scripted TTS speaks 15 characters a second).
_TTS_S_PER_CHAR = 1 / 15
# From the caller's last word to the first audio of the answer, with the lab's session options.
_NO_RACE_REPLY_S = 1.2
# Quiet left after the agent finished before the caller speaks again: no race is possible.
_MARGIN_S = 0.6


def race_free_call(seed: int, *, tools: bool = True) -> Scenario:
    """A seeded race-free call: utterances of varied lengths and gaps, maybe a tool, varied lines.

    The caller speaks again only once the agent's whole answer (tool work and speech included)
    has played, so no race can happen: any difference between base classes is a divergence.

    Args:
        seed: Picks everything: lengths, gaps, words, the tool and whether it fails, the
            caller's line, whether the STT sends interims, ``transcription_timeout``.
        tools: Whether calls may use a tool at all.
    """
    rng = random.Random(seed)
    tool = rng.choice(("none", "none", "ok", "fails")) if tools else "none"
    work = rng.choice((0.2, 0.8, 2.5))
    turns = rng.choice((1, 1, 2, 2, 3))
    tool_turn = rng.randrange(turns) if tool != "none" else -1
    start = round(rng.uniform(0.5, 1.5), 2)
    utterances = []
    rules = []
    for turn in range(turns):
        length = round(rng.choice((0.4, 0.9, 1.6, 2.6, 3.4, 4.8)) * rng.uniform(0.8, 1.2), 2)
        count = max(1, min(len(_WORDS) // turns, round(length * 2.2)))
        words = rng.sample(_WORDS, count)
        if turn == tool_turn:
            words[0] = "charge"
        words = [f"{w}{turn}" if w != "charge" else w for w in words]
        text = " ".join(words)
        end = round(start + length, 2)
        utterances.append(Utterance(start, end, text, reply_within=8.0))
        if turn == tool_turn:
            reply = "Charged." if tool == "ok" else "That did not work."
            rules.append(
                LLMRule(
                    when_user_says="charge",
                    tool_calls=(ToolCallScript("charge_card", {"amount": "ten"}),),
                )
            )
            rules.append(LLMRule(text=reply, after_tool="charge_card"))
            spoken = len(_CHARGING) * _TTS_S_PER_CHAR if work > 1 else 0.0
            answer_s = 0.5 + spoken + work + 0.6 + len(reply) * _TTS_S_PER_CHAR
        else:
            answer_s = len(f"Sure: {text}.") * _TTS_S_PER_CHAR
        start = round(end + _NO_RACE_REPLY_S + answer_s + _MARGIN_S + rng.uniform(0.0, 1.2), 2)
    agent = tool_agent(work_seconds=work, fails=tool == "fails") if tool != "none" else _plain_agent
    options: dict[str, Any] = {}
    if rng.random() < 0.3:
        options["transcription_timeout"] = 1.0
    return Scenario(
        name=f"race_free/{seed}",
        family="race_free",
        description="A seeded race-free call.",
        agent=agent,
        utterances=tuple(utterances),
        llm=tuple(rules),
        duration=round(start, 2),
        session_options=options,
        caller_line=rng.choice(_LINES),
        stt_interims=rng.random() < 0.5,
        control=True,
    )


def _plain_agent(base: type[Agent]) -> Agent:
    return base(instructions="You are a helpful restaurant assistant. Keep answers short.")
