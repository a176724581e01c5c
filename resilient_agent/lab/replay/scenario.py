"""A replay plan as a lab :class:`~resilient_agent.testing.Scenario`.

The caller says each recorded turn at its recorded times (the words the STT transcribed, and
placeholder words where the report has no transcript of speech the VAD heard); the scripted LLM
answers each recorded user message or tool output with the recorded text and tool calls after
the recorded delays; each tool says what it said at its recorded offsets and returns its
recorded output after its recorded duration. The agent is built on whichever base class runs it,
so the same replay runs on a plain ``Agent`` (fidelity) and on ``ResilientAgent`` (verdict).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

from livekit.agents import Agent

from ...testing import LLMRule, Scenario, ToolCallScript, Typed, Utterance
from ...testing.vad import VADFault
from .agents import GREETING_INSTRUCTIONS, SESSION_CLOSE_LAG_S, agent_factory, entry_instructions
from .plan import CallerTurn, ReplayPlan, ReportError
from .realtime_call import realtime_scenario
from .realtime_evidence import CUT_REST
from .recording import ReplayRecording
from .typed import UNPLAYED_REPLY, placeholder
from .vad_evidence import ringing

__all__ = ["GREETING_INSTRUCTIONS", "replay_scenario", "turn_words"]

_TAIL_S = 1.0
# a window no frame's middle falls in
_NO_WORDS_S = 0.001


def turn_words(index: int, turn: CallerTurn) -> tuple[str, ...]:
    """The words the replayed caller says in ``turn``: the heard ones amid placeholders."""
    before = tuple(f"unheard{index}w{j}" for j in range(turn.unheard))
    after = tuple(f"unheard{index}w{turn.unheard + j}" for j in range(turn.unheard_after))
    return before + turn.heard + after


def replay_scenario(
    plan: ReplayPlan,
    name: str = "replay/call",
    *,
    app: bool = False,
    tool_mocks: Mapping[str, Callable[..., Any]] | None = None,
    recording: ReplayRecording | None = None,
) -> Scenario:
    """The lab scenario that replays ``plan``.

    Args:
        plan: The recorded call.
        name: The scenario's name.
        app: The agent is the app's own class, built as the app builds it: its tools run (or
            their ``tool_mocks``) instead of the recorded ones, and it greets as it does.
        tool_mocks: Tool name to the callable run instead of that tool of the app's class.
        recording: The call's audio recording: its caller channel is the caller's line (the
            turns' words say what the STT transcribes where); None: audio made from the turns.
    """
    spoken = [
        _turn_utterances(i, t) if t.heard or plan.realtime is None else ()
        for i, t in enumerate(plan.turns)  # a realtime model's wordless turn is its own
    ]
    utterances = tuple(u for said in spoken for u in said)
    # each utterance's turn, and where a turn's last one is
    owners = tuple(t for t, said in zip(plan.turns, spoken, strict=True) for _ in said)
    last_of_turn = list(itertools.accumulate(len(said) for said in spoken))
    # livekit closes the session that long after the caller leaves the room
    caller_leaves_at = (
        max(plan.close_at - SESSION_CLOSE_LAG_S, 0.0)
        if plan.caller_left and plan.close_at is not None
        else None
    )
    if plan.close_at is not None and (plan.caller_left or plan.app_hung_up):
        duration = plan.close_at + _TAIL_S
    elif plan.script_end is not None:
        duration = plan.script_end
    else:
        duration = plan.end_at + _TAIL_S
    typed = tuple(
        Typed(
            m.at,
            m.text if m.text is not None and m.text.split() else placeholder(n),
            expect_reply=False,
        )
        for n, m in enumerate(plan.typed, start=1)
    )
    duration = max([duration, *(u.end + 0.1 for u in utterances), *(t.at + 0.1 for t in typed)])
    try:
        scenario = _scenario(
            plan, name, app, tool_mocks, utterances, duration, caller_leaves_at, last_of_turn
        )
        # typed again through RoomIO's text input at their recorded times
        scenario = dataclasses.replace(scenario, typed=typed)
        if plan.realtime is not None:
            return realtime_scenario(scenario, plan, recording)
        if recording is None:
            return scenario
        return dataclasses.replace(
            scenario,
            # the recording has the noise around a turn's words: the words go where they were
            # said, the VAD hears the rest as the call's did
            utterances=tuple(
                _recorded_words(u, t) for u, t in zip(utterances, owners, strict=True)
            ),
            caller_line="recorded",
            caller_recording=dataclasses.replace(recording.caller, silenced=ringing(plan)),
            vad="scripted" if recording.lab_vad else "silero",
            # a real VAD has no scripted faults: a turn that never ended is the recording's
            vad_fault=scenario.vad_fault if recording.lab_vad else VADFault(),
            # a line the agent channel has no audio of: its TTS returned silence
            provider_faults=(
                dataclasses.replace(
                    scenario.provider_faults, tts_silent_sentence=recording.silent.sentence
                )
                if recording.silent is not None
                else scenario.provider_faults
            ),
        )
    except ValueError as exc:  # the scenario's own checks: the report's timings disagree
        raise ReportError(f"the call cannot be replayed: {exc}") from None


def _turn_utterances(index: int, turn: CallerTurn) -> tuple[Utterance, ...]:
    """What the caller says in ``turn``: one utterance, or one per window its words were said in.

    A turn livekit's ``user_turn_limit`` cut into is said window by window (each final's words
    where its interims put them, then the words said over the cut-in), so the replay's STT
    sends its finals when the recorded one did, and the cut comes at the same word.
    """
    words = turn_words(index, turn)
    if not turn.windows:
        return (Utterance(turn.start, turn.end, " ".join(words), expect_reply=False),)
    said: list[Utterance] = []
    for start, end, count in turn.windows:
        said.append(Utterance(start, end, " ".join(words[:count]), expect_reply=False))
        words = words[count:]
    return tuple(said)


def _recorded_words(utterance: Utterance, turn: CallerTurn) -> Utterance:
    """Where ``turn``'s words go on the recording: where said; a noise turn's nowhere."""
    if turn.windows:
        return utterance  # said in its windows
    if turn.noise:
        # a window shorter than a frame: the recording's noise goes to the VAD unmarked
        return dataclasses.replace(utterance, end=utterance.start + _NO_WORDS_S)
    if turn.said is not None:
        return dataclasses.replace(utterance, start=turn.said[0], end=turn.said[1])
    return utterance


def _scenario(
    plan: ReplayPlan,
    name: str,
    app: bool,
    tool_mocks: Mapping[str, Callable[..., Any]] | None,
    utterances: tuple[Utterance, ...],
    duration: float,
    caller_leaves_at: float | None,
    last_of_turn: list[int],
) -> Scenario:
    # the VAD fault's index is the utterance's: a turn's last
    unended = [last_of_turn[i] - 1 for i, t in enumerate(plan.turns) if not t.ended]
    vad_fault = VADFault("no_end_of_speech", unended[0]) if unended else VADFault()
    if not unended and plan.vad_fault is not None:  # inferred from the recording
        failed, fault, _ = plan.vad_fault
        vad_fault = dataclasses.replace(fault, utterance=last_of_turn[failed] - 1)
    return Scenario(
        name=name,
        vad_fault=vad_fault,
        family="replay",
        description="A call replayed from livekit's session report.",
        agent=_app_factory if app else agent_factory(plan),
        utterances=utterances,
        llm=_rules(plan, app),
        # the line the app hung up after was its farewell: the contracts judge the hang-up by it
        farewell=plan.farewell,
        duration=round(duration, 3),
        session_options=_session_options(plan),
        caller_leaves_at=caller_leaves_at,
        talk_over_tolerance=None,
        tool_mocks=dict(tool_mocks or {}),
        lost_playout_report=plan.faults.lost_playout_report,
        provider_faults=dataclasses.replace(
            plan.faults.faults,
            # a slow but live provider, as the report measured it
            tts_ttfb=plan.latency.tts_ttfb,
            stt_final_after_s=plan.latency.stt_final_after,
        )
        if plan.latency.tts_ttfb is not None or plan.latency.stt_final_after is not None
        else plan.faults.faults,
    )


def _app_factory(base: type[Agent]) -> Agent:
    """The app's own agent (``base`` is its class), as the app builds it."""
    from ..catalog.own_tools import build_app_agent

    return build_app_agent(base)


def _session_options(plan: ReplayPlan) -> dict[str, Any]:
    options = plan.options
    interruption: dict[str, Any] = {}
    for key, lab_key in (
        ("min_interruption_duration", "min_duration"),
        ("min_interruption_words", "min_words"),
        ("allow_interruptions", "enabled"),
        ("discard_audio_if_uninterruptible", "discard_audio_if_uninterruptible"),
    ):
        if key in options:
            interruption[lab_key] = options[key]
    result: dict[str, Any] = {"interruption": interruption} if interruption else {}
    if "max_tool_steps" in options:
        result["max_tool_steps"] = options["max_tool_steps"]
    if plan.close_transcript_timeout is not None:
        result["session_close_transcript_timeout"] = plan.close_transcript_timeout
    if plan.turn_limit is not None:
        result["user_turn_limit"] = {"max_words": plan.turn_limit}
    return result


def _rules(plan: ReplayPlan, app: bool = False) -> tuple[LLMRule, ...]:
    rules: list[LLMRule] = []
    seen: set[tuple[str | None, str | None]] = set()
    hangs = plan.faults.llm_hangs or {}
    entered: set[str] = set()
    for answer in plan.answers:
        calls = tuple(ToolCallScript(c.name, dict(c.arguments)) for c in answer.tool_calls)
        if answer.on_enter is not None and not app:
            if answer.on_enter not in entered:  # an agent entered again asks again
                entered.add(answer.on_enter)
                rules.append(
                    LLMRule(
                        answer.text,
                        calls,
                        when_instructed=entry_instructions(answer.on_enter),
                        ttft=answer.ttft,
                        duration=max(answer.duration, answer.ttft),
                    )
                )
            continue
        if answer.after_line is not None:
            # asked again right after the model's own line its server cut
            rules.append(
                LLMRule(
                    answer.text,
                    calls,
                    after_agent_line=answer.after_line,
                    ttft=answer.ttft,
                    duration=max(answer.duration, answer.ttft),
                )
            )
            continue
        key = (answer.after_user, answer.after_tool)
        if key in seen:
            continue  # the same context answered again (a retry): the first answer stands
        seen.add(key)
        # the app greets with its own instructions: its greeting answers any context that no
        # recorded rule does
        greeting = answer.after_tool is None and answer.after_user is None
        rules.append(
            LLMRule(
                f"{answer.text} {CUT_REST}" if answer.cut_by_error else answer.text,
                calls,
                when_user_says=answer.after_user,
                after_tool=answer.after_tool,
                when_instructed=GREETING_INSTRUCTIONS if greeting and not app else None,
                ttft=answer.ttft,
                duration=max(answer.duration, answer.ttft),
                silent_answers=answer.silent_before,
                # a reply that never came hangs whenever it is asked; a realtime reply asked
                # for again, or a pipeline request that produced no token, hangs until the
                # agent asked again
                hangs_before=(
                    math.inf
                    if answer.hung
                    else _asked_again(answer.hangs_until)
                    if answer.hangs_until is not None
                    else hangs.get(key)
                ),
                # a reply its server cut: the part that played, then what the error cut
                cut_after_words=len(answer.text.split()) if answer.cut_by_error else None,
                cut_audio_seconds=answer.played if answer.cut_by_error else None,
                fails_after_reply=answer.fails_after,
            )
        )
    cut_replies = {m.text for m in plan.typed if m.answered_at_once}
    for message in plan.user_messages:
        if message.split() and (message, None) not in seen:
            # the recorded LLM never answered it (it failed, or the call moved on): nor does
            # the replay's
            # (its answer the TTS failed to say stands in: livekit failed to synthesize it)
            text = (plan.faults.unsaid or {}).get(message, "")
            # a message typed and answered at once had its answer made: it was cut unplayed
            text = text or (UNPLAYED_REPLY if message in cut_replies else "")
            rules.append(LLMRule(text, when_user_says=message))
            seen.add((message, None))
    timeouts = plan.faults.llm_timeouts or {}
    rules = [
        dataclasses.replace(r, times_out_before=timeouts[r.when_user_says])
        if r.when_user_says is not None and r.when_user_says in timeouts
        else r
        for r in rules
    ]
    answered = {a.after_tool for a in plan.answers}
    for run in plan.tool_runs:
        if run.name not in answered:
            # the recorded call never answered this tool's output: nor does the replay
            rules.append(LLMRule("", after_tool=run.name))
            answered.add(run.name)
    # an agent's entry first (its context may end in a user message a rule answers); a longer
    # user message first: a short one may be a part of it; a catch-all last
    return tuple(
        sorted(
            rules,
            key=lambda r: (
                r.when_instructed is None or r.when_instructed == GREETING_INSTRUCTIONS,
                r.when_user_says is None
                and r.after_tool is None
                and r.when_instructed is None
                and r.after_agent_line is None,
                -len(r.when_user_says or ""),
            ),
        )
    )


def _asked_again(at: float | None) -> float | None:
    """Until when a reply asked for again at ``at`` hangs: the requests before that instant."""
    # the replayed agent asks again in the recorded instant, give or take the clock's rounding
    return None if at is None else at - 1e-3
