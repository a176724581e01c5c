"""The providers' failures a report records, as the replay's providers fail them again.

livekit's report has an ``error`` event per failure of the STT, the LLM or the TTS, with its
time and whether livekit could recover (retry) from it, not the failure itself. The replay
reads them back as the lab's faults (:class:`~resilient_agent.testing.ProviderFaults`, an LLM
rule's ``times_out_before``):

- an STT error livekit could not recover from: the STT stream dies then; the caller
  untranscribed from a turn the agent did not speak over to the end of the call, with no
  error: the STT went silent then;
- LLM errors right as a request (or its retry) was made: the provider refused the call's
  first requests (one refusal per error, status unknown: 503 assumed); LLM errors 5 s or more
  after it: its requests timed out until the last of them;
- TTS errors: one that livekit could not recover from alone is a sentence whose synthesis
  raised; retried ones are a sentence synthesized with no audio. The sentence is the first
  one not said before the first error, counted as livekit splits lines into sentences;
- a realtime model's errors (``realtime_model_error``): one its plugin recovered from while the
  model's line played cut that line (Gemini Live's server closing with 1011: the plugin ends
  the reply's stream where the socket went and reconnects); the replay's model fails as that
  reply's generation ends (the plan's answer, see :mod:`.realtime_evidence`), its reply being
  the part that played. One with no line playing is not replayed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from livekit.agents import tokenize

from ...testing import ConnectRefusals, ProviderFaults

__all__ = [
    "UNSAID_ANSWER",
    "FaultPlan",
    "ProviderError",
    "fault_plan",
    "provider_error",
    "sentence_count",
]

UNSAID_ANSWER = "An answer the TTS could not say."
"""The replay's answer to a message whose recorded answer the TTS failed to say (one sentence)."""

# livekit's report names an error's provider by its type
_PROVIDERS: Mapping[str, str] = MappingProxyType(
    {
        "stt_error": "stt",
        "llm_error": "llm",
        "tts_error": "tts",
        "realtime_model_error": "realtime",
    }
)
# an LLM error this soon after the request (or the retry) was made refused it; a later one
# timed it out: livekit retries within 2 s, a request times out after 10 s (conn_options)
_REFUSED_WITHIN_S = 5.0
_REFUSAL_STATUS = 503


@dataclass(frozen=True)
class ProviderError:
    """One ``error`` event of the report.

    Attributes:
        at: Call seconds.
        provider: ``stt``, ``llm``, ``tts`` or ``realtime`` (a realtime model's).
        recoverable: livekit retried after it (a realtime model's plugin reconnected).
        context: For the LLM and the TTS: the caller's last message by then (what the
            failing request, or the answer not said, answered); for a realtime model: the
            line of the model's the error cut (see :mod:`.realtime_evidence`).
        since_context: For the LLM: seconds since that message (or a tool's output) was
            committed, or since the error before (a retry).
        answered_before: For the LLM: an LLM answer was said before it.
        sentences_before: For the TTS: sentences said before it.
    """

    at: float
    provider: str
    recoverable: bool
    context: str | None = None
    since_context: float = 0.0
    answered_before: bool = False
    sentences_before: int = 0


@dataclass(frozen=True)
class FaultPlan:
    """The replay's providers' faults, and what was assumed to get them.

    Attributes:
        faults: The STT's and TTS's faults, and the LLM's refusals.
        llm_timeouts: The caller's message to the call seconds until which the LLM's
            requests answering it time out.
        unsaid: The caller's messages whose answer the TTS failed to say, with that answer:
            the line said again after the failure (a middleware's recovery), or, as the report
            never had its words, :data:`UNSAID_ANSWER`.
        assumptions: One line per inference.
        llm_hangs: The context of an answer (the user message, the tool whose output it
            answered) to the call seconds until which the LLM's requests answering it never
            produce a token (inferred, see :mod:`.pipeline_evidence`).
        lost_playout_report: The audio output never reports the playout of a line it cleared
            (inferred, see :mod:`.pipeline_evidence`).
    """

    faults: ProviderFaults = field(default_factory=ProviderFaults)
    llm_timeouts: Mapping[str, float] | None = None
    unsaid: Mapping[str, str] | None = None
    assumptions: tuple[str, ...] = ()
    llm_hangs: Mapping[tuple[str | None, str | None], float] | None = None
    lost_playout_report: bool = False


def provider_error(event: Mapping[str, Any], at: float) -> ProviderError | None:
    """The provider failure an ``error`` event records; None for another kind of error."""
    error = event.get("error")
    if not isinstance(error, Mapping):
        return None
    provider = _PROVIDERS.get(str(error.get("type", "")))
    if provider is None:
        return None
    return ProviderError(round(at, 3), provider, bool(error.get("recoverable", False)))


def sentence_count(lines: Sequence[str]) -> int:
    """How many sentences livekit's TTS is given for ``lines`` (its default tokenizer)."""
    tokenizer = tokenize.blingfire.SentenceTokenizer(retain_format=True)
    return sum(len(tokenizer.tokenize(line)) for line in lines if line.strip())


def fault_plan(
    errors: Sequence[ProviderError],
    recovered: str | None = None,
    stt_silent_at: float | None = None,
) -> FaultPlan:
    """The faults that make the replay's providers fail as ``errors`` recorded.

    Args:
        errors: The report's provider errors, in order.
        recovered: The line said after the first TTS error, before the caller spoke again:
            the answer the TTS failed to say, said again.
        stt_silent_at: When the STT stopped answering with no error (no ``error`` event).
    """
    assumptions: list[str] = []
    faults: dict[str, Any] = {}
    dead = next((e for e in errors if e.provider == "stt" and not e.recoverable), None)
    if dead is not None and stt_silent_at is not None and stt_silent_at >= dead.at:
        stt_silent_at = None  # a dead STT answers nothing: its death says why
    if stt_silent_at is not None:
        faults["stt_silent_at"] = stt_silent_at
        assumptions.append(
            f"at {stt_silent_at:.2f} s: no transcript of the caller from then on, the agent "
            "silent: the STT took the audio and answered nothing"
        )
    if dead is not None:
        faults["stt_dies_at"] = dead.at
        assumptions.append(f"at {dead.at:.2f} s: the STT failed for good (an stt_error)")
    llm = [e for e in errors if e.provider == "llm"]
    refused = [e for e in llm if e.since_context < _REFUSED_WITHIN_S]
    if refused and not refused[0].answered_before:
        faults["llm_refused"] = ConnectRefusals(status=_REFUSAL_STATUS, first=len(refused))
        assumptions.append(
            f"at {refused[0].at:.2f} s: the LLM provider refused the call's first "
            f"{len(refused)} request(s) ({_REFUSAL_STATUS} assumed: the report has no status)"
        )
    timeouts: dict[str, float] = {}
    for error in llm:
        if error.since_context >= _REFUSED_WITHIN_S and error.context is not None:
            timeouts[error.context] = error.at + 1e-3
    for context, until in timeouts.items():
        assumptions.append(
            f"until {until:.2f} s: the LLM's requests answering {context!r} timed out"
        )
    assumptions.extend(_realtime_assumptions(errors))
    tts = [e for e in errors if e.provider == "tts"]
    unsaid: dict[str, str] = {}
    if tts:
        sentence = tts[0].sentences_before + 1
        retried = any(e.recoverable for e in tts)
        faults["tts_empty_sentence" if retried else "tts_fails_sentence"] = sentence
        how = "gave no audio (retried)" if retried else "raised"
        assumptions.append(f"at {tts[0].at:.2f} s: the TTS {how} on sentence {sentence}")
        if tts[0].context is not None:
            unsaid[tts[0].context] = recovered or UNSAID_ANSWER
            assumptions.append(
                f"the answer to {tts[0].context!r} the TTS failed to say: {recovered!r}, said "
                "again after the failure"
                if recovered
                else f"the answer to {tts[0].context!r} the TTS failed to say is not in the "
                f"report: {UNSAID_ANSWER!r} stands for it"
            )
    return FaultPlan(ProviderFaults(**faults), timeouts or None, unsaid or None, tuple(assumptions))


def _realtime_assumptions(errors: Sequence[ProviderError]) -> list[str]:
    """What was read of the realtime model's errors: the line each cut, or nothing replayed."""
    found: list[str] = []
    for error in errors:
        if error.provider != "realtime":
            continue
        if error.context is None:
            found.append(
                f"at {error.at:.2f} s: the realtime model failed (a realtime_model_error) with no "
                "line of it cut: not replayed"
            )
            continue
        found.append(
            f"at {error.at:.2f} s: the model's server failed (a recoverable "
            f"realtime_model_error) while its line {error.context!r} played: the reply's stream "
            "ended there (its turn ended with it), what played is all the model sent; what it "
            "meant to say after is not in the report"
        )
    return found
