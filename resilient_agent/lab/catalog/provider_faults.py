"""Catalog scenarios for providers that fail mid-call.

A dying STT stream, an LLM that always times out, and (a control) a TTS error mid-speech that
livekit already survives.

Timings follow the catalog's clock: the caller's turn ends 0.55 s after they stop, the scripted
LLM answers after 0.3 s, TTS speaks 15 characters a second. livekit's default connection options
apply (an LLM attempt times out after 10 s, ``max_retry`` 3).
"""

from __future__ import annotations

from ...testing import LLMRule, ProviderFaults, Scenario, Sweep, Utterance
from . import agents

__all__ = ["FALLBACK_LINE", "provider_fault_scenarios"]

# The turn ends (1.2 s no-race latency), the reply thinks for the Watchdog's 6 s without a sound
# and is asked again, which fails the same way: after two failed attempts the fallback line
# comes at 1.5 times the no-race latency.
_FALLBACK_BOUND = 1.2 + 2 * 6.0 + 1.5 * 1.2
# LlmFallback's default line (tests/test_provider_faults.py checks that they agree)
FALLBACK_LINE = "Sorry, I'm having trouble right now. Could you say that again in a moment?"


def provider_fault_scenarios() -> list[Scenario]:
    """The provider-fault family, controls included."""
    return [
        Scenario(
            name="provider/stt_dies_mid_call",
            family="provider",
            description=(
                "The STT stream raises a plain exception in the middle of the caller's second "
                "sentence: livekit retries only connection errors, so the stream is dead for "
                "the rest of the call."
            ),
            agent=agents.plain_agent,
            utterances=(
                Utterance(1.0, 2.4, "hello is this the restaurant"),
                Utterance(7.0, 9.4, "I would like a table for four people tonight"),
                Utterance(15.0, 16.4, "and do you have parking nearby"),
            ),
            duration=22.0,
            provider_faults=ProviderFaults(stt_dies_at=8.0),
            # the death lands before, inside, at the end of and after the second sentence
            sweep=Sweep(utterance=1, start=5.4, stop=8.2, step=0.2),
        ),
        Scenario(
            name="provider/llm_always_times_out",
            family="provider",
            description=(
                "Every LLM attempt times out (10 s each, retried by livekit, asked again by the "
                "Watchdog): the caller must hear a short fallback line, not half a minute of "
                "silence."
            ),
            agent=agents.plain_agent,
            utterances=(
                Utterance(1.0, 2.5, "what time do you open tomorrow", reply_within=_FALLBACK_BOUND),
            ),
            llm=(LLMRule(text="We open at noon.", times_out_before=60.0),),
            duration=30.0,
            provider_faults=ProviderFaults(fallback_line=FALLBACK_LINE),
        ),
        Scenario(
            name="control/tts_error_mid_reply",
            family="control",
            description=(
                "The TTS fails on the second sentence of a reply: the reply stops there, and "
                "the caller's next question is answered as usual."
            ),
            agent=agents.plain_agent,
            utterances=(
                # its answer is cut by the TTS error, for both agents alike
                Utterance(1.0, 2.4, "what desserts do you make", expect_reply=False),
                Utterance(9.0, 10.4, "is the terrace open"),
            ),
            llm=(
                LLMRule(
                    when_user_says="desserts",
                    text="We make a lemon tart. We also have a chocolate mousse.",
                ),
            ),
            provider_faults=ProviderFaults(tts_fails_sentence=2),
            control=True,
        ),
    ]
