"""Which catalog calls run on a stack of real provider plugins (``lab --stack NAME``).

A pipeline call runs with the stack's plugins against the local wire emulators. A call is left
out, with the reason, when the stack cannot play it: a realtime model has no pipeline plugins;
a scripted fault of the scripted STT or TTS is a fault of the lab's own fakes (the wire faults
are the emulators'); and a quiet or zeros caller line is followed by the scripted STT by time,
which a wire STT, hearing only the bytes it gets, cannot do. A realtime stack (``gemini-live``)
plays its provider's realtime calls (``realtime_gemini``) and leaves out everything else.

A non-streaming STT (``openai-stt``: livekit transcribes each of the VAD's segments once it has
ended) also leaves out the calls whose race needs transcripts while the caller still talks:
livekit's ``user_turn_limit``, which it checks at each final transcript, and noise that holds
the VAD's end of speech (so the caller's words) past the reply's bound.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..testing import Scenario
from ..testing.stacks import STACKS
from .real_speech_variants import LeftOut

__all__ = ["stack_variants"]


def _needs_streaming_stt(scenario: Scenario) -> str | None:
    """Why ``scenario``'s race needs an STT that transcribes while the caller talks, or None."""
    if "user_turn_limit" in scenario.session_options:
        return (
            "livekit's user_turn_limit cuts in at a final transcript that comes while the caller "
            "talks; a non-streaming STT's only final comes after the VAD's end of speech, and "
            "livekit answers the turn instead (the cut-in never plays)"
        )
    for utterance in scenario.utterances:
        if not utterance.expect_reply:
            continue
        bound = utterance.reply_within or scenario.reply_bound
        for noise in scenario.noise:
            if noise.start < utterance.end and noise.end > utterance.end + bound:
                return (
                    "noise goes on past the reply's bound after the caller's words: the VAD "
                    "hears it as speech, and a non-streaming STT gets the words only at the "
                    "VAD's end of speech, when the noise stops"
                )
    return None


def _not_on_a_stack(scenario: Scenario, realtime: str | None = None) -> str | None:
    if realtime is not None:
        # a realtime stack plays one provider's realtime scenarios, and only those
        if scenario.model != realtime:
            return f"not a {realtime} call: the stack's real model plays that provider only"
        if scenario.caller_line != "marked":
            return (
                f"a {scenario.caller_line} caller line, which only the scripted model can "
                "follow (by the script's time); a provider hears only the bytes it gets"
            )
        return None
    if scenario.model != "pipeline":
        return "a realtime model: no STT, LLM and TTS plugins to put on a stack"
    faults = scenario.provider_faults
    # a TTS error on a sentence is Cartesia's error message on the wire; the rest is the lab's
    tts_wire_only = dataclasses.replace(faults, tts_fails_sentence=None)
    if faults.stt_faulty or tts_wire_only.tts_faulty:
        return "a scripted fault of the lab's own STT or TTS, not of a provider's wire"
    if scenario.caller_line != "marked":
        return (
            f"a {scenario.caller_line} caller line, which only the scripted STT can follow (by "
            "the script's time); a provider hears only the bytes it gets"
        )
    return None


def stack_variants(
    catalog: Sequence[Scenario], stack: str | None = None
) -> tuple[list[Scenario], list[LeftOut]]:
    """The scenarios a stack runs, and those it leaves out with the reason.

    Args:
        catalog: The scenarios chosen.
        stack: The stack's name; a realtime stack (``gemini-live``) runs its provider's
            realtime calls instead of the pipeline calls.
    """
    spec = STACKS.get(stack) if stack is not None else None
    realtime = spec.realtime if spec is not None else None
    streaming = spec is None or spec.streaming_stt
    runnable: list[Scenario] = []
    left_out: list[LeftOut] = []
    for scenario in catalog:
        why = _not_on_a_stack(scenario, realtime)
        if why is None and not streaming:
            why = _needs_streaming_stt(scenario)
        if why is None:
            runnable.append(scenario)
        else:
            left_out.append(LeftOut(scenario.name, why))
    return runnable, left_out
