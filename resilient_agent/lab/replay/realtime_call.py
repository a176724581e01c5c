"""A replay plan of a realtime model's call as a lab scenario on the scripted realtime model.

The lab's :class:`~resilient_agent.testing.realtime.ScriptedRealtimeModel` of the recorded
provider hears the caller and answers by the same rules a pipeline replay gives its LLM (the
recorded messages and tool calls, after the recorded delays from the request that asked for
them). The caller says each turn the model transcribed where the model heard it (the turn's
``said``, see :func:`.realtime.speech_window`); a turn it transcribed nothing of is not the
caller's to say (Gemini's server reports the caller speaking as its own reply begins), but
for one OpenAI's server heard begin as the call closed (a word no transcript has).

With the recording, a turn whose words the recording has no speech for was said earlier and
heard late: the agent held the caller's audio from the model while a protected line played
(``ResilientAgent``'s ``RealtimeInputHold``) and sent it after. Its words go on the recording's
last speech before it that no other turn has, where the caller said them; the replayed agent
holds them as the recorded one did, so the line they were said over was protected: by the
tool its answer called (``ctx.disallow_interruptions()`` as it started), or the greeting itself.
Without the recording, words the model heard all at once (faster than they can be said) were
held the same way: they are said before, in the line that ended as they were heard.

A caller who began to speak as Gemini cut its line, the session closing before any word of theirs
was transcribed (the plan's ``barge_ins``), begins a word there that the close cuts off: a
placeholder (``bargein0w0``) the model could not hear whole before the close. With the
recording, only where it has the caller's speech.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ...testing import ProviderFaults, Scenario, Utterance
from ...testing.audio import FRAME_SAMPLES, FRAME_SECONDS, RECORDED_SPEECH_LEVEL
from ...testing.vad import VADFault
from .agents import agent_factory
from .plan import ReplayPlan
from .realtime import FRAME_S, SERVER_SILENCE_S
from .recording import ReplayRecording

__all__ = ["held_before", "held_where_said", "realtime_scenario", "speech_spans"]

# words heard faster than this each were held and sent at once; said at the second's pace
_HELD_WORD_S = 0.05
_WORD_S = 0.4


def realtime_scenario(
    scenario: Scenario, plan: ReplayPlan, recording: ReplayRecording | None
) -> Scenario:
    """``scenario`` (the pipeline replay of ``plan``) on the recorded provider's realtime model.

    Raises:
        ValueError: The scenario's own checks (the report's timings disagree).
    """
    assert plan.realtime is not None
    utterances = tuple(
        Utterance(t.said[0], t.said[1], " ".join(t.heard), expect_reply=False)
        if t.heard and t.said is not None
        # OpenAI's server heard speech the call closed in before it transcribed a word
        else Utterance(t.start - FRAME_S, t.end, f"unheard{index}w0", expect_reply=False)
        for index, t in enumerate(plan.turns)
        if (t.heard and t.said is not None) or (plan.realtime == "openai" and not t.ended)
    )
    heard_at = utterances
    spans = speech_spans(recording.caller.samples()) if recording is not None else None
    if spans is not None:
        utterances = held_where_said(utterances, spans)
    else:
        utterances = held_before(utterances)
    held = [u.start for u, was in zip(utterances, heard_at, strict=True) if u != was]
    utterances += _barge_ins(plan.barge_ins, spans)
    if held:
        scenario = dataclasses.replace(scenario, agent=agent_factory(_protected(plan, held)))
    return dataclasses.replace(
        scenario,
        utterances=utterances,
        model="realtime_openai" if plan.realtime == "openai" else "realtime_gemini",
        # the model's server detects turns: no VAD of livekit's, no STT or TTS to fail
        vad="scripted",
        vad_fault=VADFault(),
        provider_faults=_model_faults(scenario.provider_faults),
        caller_line="recorded" if recording is not None else "marked",
        caller_recording=recording.caller if recording is not None else None,
        duration=max([scenario.duration, *(u.end + 0.1 for u in utterances)]),
    )


def speech_spans(samples: np.ndarray) -> list[tuple[float, float]]:
    """The stretches of a recorded caller line with speech, pauses shorter than a turn's joined.

    A frame carries speech when it is louder than :data:`RECORDED_SPEECH_LEVEL`, as the lab
    marks a recording's words.
    """
    frames = len(samples) // FRAME_SAMPLES
    levels = np.abs(samples[: frames * FRAME_SAMPLES].astype(np.int32)).reshape(
        frames, FRAME_SAMPLES
    )
    voiced = np.flatnonzero(levels.mean(axis=1) > RECORDED_SPEECH_LEVEL)
    spans: list[tuple[float, float]] = []
    for index in voiced:
        start, end = index * FRAME_SECONDS, (index + 1) * FRAME_SECONDS
        if spans and start - spans[-1][1] < SERVER_SILENCE_S:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
    return [(round(a, 3), round(b, 3)) for a, b in spans]


def held_where_said(
    utterances: Sequence[Utterance], spans: Sequence[tuple[float, float]]
) -> tuple[Utterance, ...]:
    """Each utterance the recording has no speech in moved to where the caller said it.

    That is the last span of recorded speech before it that no utterance overlaps: the audio
    was held from the model and sent to it later.
    """
    placed = list(utterances)
    for index, utterance in enumerate(utterances):
        if any(a < utterance.end and utterance.start < b for a, b in spans):
            continue
        free = [
            (a, b)
            for a, b in spans
            if b <= utterance.start + 1e-6 and not any(a < u.end and u.start < b for u in placed)
        ]
        if free:
            placed[index] = dataclasses.replace(utterance, start=free[-1][0], end=free[-1][1])
    return tuple(placed)


def held_before(utterances: Sequence[Utterance]) -> tuple[Utterance, ...]:
    """Without a recording: each utterance heard all at once said before, where it was held.

    Audio held from the model reaches it in one go: its words are heard in less time than
    they take to say. They were said before, while the line that ended as they were heard
    played; the replay says them at the report's pace of words, ending a server's silence and a
    frame before they were heard, so the held audio carries that silence as it did.
    """
    placed = list(utterances)
    for index, utterance in enumerate(utterances):
        words = len(utterance.text.split())
        if utterance.end - utterance.start >= words * _HELD_WORD_S:
            continue
        end = utterance.start - SERVER_SILENCE_S - FRAME_S
        start = end - words * _WORD_S
        before = placed[index - 1].end if index else 0.0
        if start > before:
            placed[index] = dataclasses.replace(utterance, start=round(start, 3), end=round(end, 3))
    return tuple(placed)


def _barge_ins(
    times: Sequence[float], spans: Sequence[tuple[float, float]] | None
) -> tuple[Utterance, ...]:
    """The words a caller began as Gemini cut its line, where the recording (if any) has them.

    One word a word's length long: the model hears it once half of it has arrived, after the
    close that cut it off.
    """
    return tuple(
        Utterance(at, round(at + _WORD_S, 3), f"bargein{n}w0", expect_reply=False)
        for n, at in enumerate(times)
        if spans is None or any(a <= at + FRAME_S / 2 < b for a, b in spans)
    )


def _protected(plan: ReplayPlan, held: Sequence[float]) -> ReplayPlan:
    """``plan`` with the lines playing where held words were said made uninterruptible."""
    runs = list(plan.tool_runs)
    greeting = plan.greeting_protected
    for said_at in held:
        began = [a for a in plan.answers if a.at + a.ttft <= said_at and a.text]
        if not began:
            continue
        line = began[-1]
        start = line.at + line.ttft
        names = {c.name for c in line.tool_calls}
        calls = [
            i
            for i, r in enumerate(runs)
            if r.name in names and start - 1e-3 <= r.started <= said_at and r.protects_after is None
        ]
        for i in calls:
            runs[i] = dataclasses.replace(runs[i], protects_after=0.0)
        if not calls and (line.after_user, line.after_tool, line.after_line) == (None,) * 3:
            greeting = greeting or line.on_enter is None
    return dataclasses.replace(plan, tool_runs=tuple(runs), greeting_protected=greeting)


def _model_faults(faults: ProviderFaults) -> ProviderFaults:
    """The faults a realtime call can have: none of an STT's or a TTS's."""
    return dataclasses.replace(
        faults,
        **{
            f.name: None
            for f in dataclasses.fields(ProviderFaults)
            if f.name.startswith(("stt_", "tts_"))
        },
    )
