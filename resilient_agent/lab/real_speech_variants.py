"""The catalog with real speech (``resilient-agent lab --speech real``).

Each race that makes sense with real audio becomes a real-speech variant: the caller's words are
an espeak-ng recording starting where the scripted utterance starts, livekit's embedded Silero
VAD hears them, PocketSphinx transcribes them, and the agent speaks with an espeak-ng voice. Each
utterance's text becomes its reference transcription (see
:mod:`resilient_agent.testing.real_speech`). A race is left out, with the reason, when real
audio cannot reproduce it: a scripted fault of the VAD, synthetic noise, a typed message, or a
recognizer that does not hear the word the scripted LLM answers to.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..testing import Scenario, Utterance
from ..testing.audio import SAMPLE_RATE
from ..testing.real_speech import CALLER_VOICE, RealSpeech, Voice, caller_recording
from ..testing.speech import load_wav
from ..testing.vad import SILENCE_TO_END_SPEECH
from .catalog import CATALOG

__all__ = [
    "LeftOut",
    "RealSpeechUnavailable",
    "real_speech_variants",
    "with_real_speech",
]

# The fastest a recording may be spoken to keep its scripted window (espeak-ng's default is 150).
_FIT_WORDS_PER_MINUTE = 200
# The fastest a recording may be spoken to end before the next utterance.
_MAX_WORDS_PER_MINUTE = 240
# A recording must end this long before the next utterance starts.
_GAP_S = 0.2
# Silence after the caller's last sound that Silero surely hears as the end of a turn: its
# END_OF_SPEECH comes 0.54-0.69 s after it over the catalog's recordings (livekit's 0.55 s
# from its speech probability's fall), where the scripted VAD's comes 0.55 s after the end.
_SILERO_TURN_BREAK_S = 0.8


@dataclass(frozen=True)
class LeftOut:
    """A scenario that does not run with real speech.

    Attributes:
        scenario: Its name.
        why: The reason, in one sentence.
    """

    scenario: str
    why: str


def _phrases() -> tuple[str, ...]:
    """The recognizer's domain: every sentence a caller says in the catalog's pipeline calls.

    A realtime call never runs with real speech (its model hears markers, not words), so its
    sentences stay out of the recognizer's language model.
    """
    return tuple(sorted({u.text for s in CATALOG if s.model == "pipeline" for u in s.utterances}))


def _not_with_real_audio(scenario: Scenario) -> str | None:
    if scenario.model != "pipeline":
        return "a realtime model: no STT to recognize real speech with (the model hears markers)"
    if scenario.typed:
        return "a typed chat message, not speech"
    if scenario.vad_fault.mode != "healthy":
        return (
            f"a scripted VAD fault ({scenario.vad_fault.mode}): real speech is heard by livekit's "
            "embedded Silero VAD, which cannot be made to fail on cue"
        )
    if scenario.noise:
        return "synthetic noise: Silero does not take it for speech, so the stall never starts"
    return None


def _recorded(utterance: Utterance, following: Utterance | None) -> tuple[Utterance, str] | str:
    """The utterance said by the caller's voice, fitted before ``following``; or why it cannot be.

    The caller's voice keeps the scripted end where the caller can say it a little faster (up
    to ``_FIT_WORDS_PER_MINUTE``): race windows were chosen for the scripted length. Otherwise
    it runs at its natural length. Either way it is sped up as far as needed for the recording
    (with espeak-ng's closing silence) to end before the next utterance, and for a pause the
    scripted VAD hears as the end of a turn to stay one for Silero.
    """
    window = utterance.end - utterance.start
    voiced = _length(utterance.text, CALLER_VOICE, trailing_silence=False)
    natural_rate = CALLER_VOICE.words_per_minute
    rate = natural_rate
    if voiced > window:
        fitted = math.ceil(natural_rate * voiced / window)
        if fitted <= _FIT_WORDS_PER_MINUTE:
            rate = fitted
    # the last one may run long: the call is then extended by as much
    if following is not None:
        if following.start - utterance.end >= SILENCE_TO_END_SPEECH:
            voice_room = following.start - _SILERO_TURN_BREAK_S - utterance.start
            needed = math.ceil(natural_rate * voiced / voice_room) if voice_room > 0 else None
            if needed is None or needed > _MAX_WORDS_PER_MINUTE:
                return (
                    f"{utterance.text!r} cannot be said with the {_SILERO_TURN_BREAK_S} s pause "
                    "Silero needs to end the turn before the next utterance"
                )
            rate = max(rate, needed)
        whole = _length(utterance.text, CALLER_VOICE)
        room = following.start - _GAP_S - utterance.start
        if room <= 0 or math.ceil(natural_rate * whole / room) > _MAX_WORDS_PER_MINUTE:
            return f"{utterance.text!r} cannot be said before the next utterance"
        rate = max(rate, math.ceil(natural_rate * whole / room))
    voice = Voice(CALLER_VOICE.name, rate)
    path = caller_recording(utterance.text, voice)
    end = utterance.start + _length(utterance.text, voice)
    return dataclasses.replace(utterance, end=end, audio=str(path)), utterance.text


def _length(text: str, voice: Voice, *, trailing_silence: bool = True) -> float:
    recording = caller_recording(text, voice, trailing_silence=trailing_silence)
    return len(load_wav(recording)) / SAMPLE_RATE


def real_speech_variant(scenario: Scenario) -> Scenario | LeftOut:
    """The real-speech variant of ``scenario``, or why it is left out."""
    why = _not_with_real_audio(scenario)
    if why is not None:
        return LeftOut(scenario.name, why)
    real = RealSpeech(phrases=_phrases(), said=tuple(u.text for u in scenario.utterances))
    utterances: list[Utterance] = []
    alternatives: list[tuple[str, ...]] = []
    ordered = list(scenario.utterances)
    for index, utterance in enumerate(ordered):
        following = ordered[index + 1] if index + 1 < len(ordered) else None
        recorded = _recorded(utterance, following)
        if isinstance(recorded, str):
            return LeftOut(scenario.name, recorded)
        moved, said = recorded
        assert moved.audio is not None
        references = real.references(load_wav(Path(moved.audio)))
        reference = references[0]
        if not all(references):
            return LeftOut(scenario.name, f"the recognizer hears nothing in {said!r}")
        for rule in scenario.llm:
            keyword = rule.when_user_says
            if not keyword or keyword.lower() not in said.lower():
                continue
            for heard in references:
                if keyword not in heard:
                    return LeftOut(
                        scenario.name,
                        f"the recognizer hears {said!r} as {heard!r}: the LLM's rule for "
                        f"{keyword!r} would not answer it",
                    )
        alternatives.append(tuple(dict.fromkeys(r for r in references if r != reference)))
        utterances.append(dataclasses.replace(moved, text=reference))
    overrun = max((u.end - s.end for u, s in zip(utterances, ordered, strict=True)), default=0.0)
    return dataclasses.replace(
        scenario,
        utterances=tuple(utterances),
        vad="silero",
        real_speech=dataclasses.replace(real, alternatives=tuple(alternatives)),
        duration=scenario.duration + max(0.0, overrun),
    )


def real_speech_variants(
    chosen: Sequence[Scenario],
) -> tuple[list[Scenario], list[LeftOut]]:
    """The real-speech variants of ``chosen``, and the ones left out with their reasons."""
    variants: list[Scenario] = []
    left_out: list[LeftOut] = []
    for scenario in chosen:
        result = real_speech_variant(scenario)
        if isinstance(result, LeftOut):
            left_out.append(result)
        else:
            variants.append(result)
    return variants, left_out


class RealSpeechUnavailable(RuntimeError):
    """espeak-ng or pocketsphinx is missing; the message says how to install it."""


def with_real_speech(chosen: Sequence[Scenario], out: TextIO) -> list[Scenario]:
    """The real-speech variants of ``chosen``; one ``LEFT OUT`` line on ``out`` per race left out.

    Raises:
        RealSpeechUnavailable: espeak-ng or pocketsphinx is missing, or nothing can run.
    """
    started = time.perf_counter()
    try:
        variants, left_out = real_speech_variants(chosen)
    except (ImportError, RuntimeError) as exc:
        raise RealSpeechUnavailable(f"--speech real: {exc}") from exc
    for item in left_out:
        print(f"LEFT OUT  {item.scenario:<52} {item.why}", file=out, flush=True)
    if not variants:
        raise RealSpeechUnavailable("--speech real: none of the chosen scenarios runs with it")
    print(
        f"real speech: {len(variants)} scenario(s), {len(left_out)} left out; recordings and "
        f"reference transcriptions ready in {time.perf_counter() - started:.1f}s",
        file=out,
        flush=True,
    )
    return variants
