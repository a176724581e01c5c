"""Catalog scenarios for providers that fail mid-call.

A dying STT stream, one that stays open and answers nothing, an LLM that always times out, one
that refuses every attempt of a reply (503), one that keeps its stream alive and sends no
token, a TTS that ends a reply without a frame or returns silence for it, and (controls) an STT
slow to its final transcript, an LLM that refuses one request (429), an LLM slow to its first
token, a TTS error mid-speech that livekit already survives and a TTS slow to its first byte.

Timings follow the catalog's clock: the caller's turn ends 0.55 s after they stop, the scripted
LLM answers after 0.3 s, TTS speaks 15 characters a second. livekit's default connection options
apply (an LLM attempt times out after 10 s, ``max_retry`` 3).
"""

from __future__ import annotations

from ...testing import LLMRule, ProviderFaults, Scenario, Sweep, Utterance
from ...testing.refusals import ConnectRefusals
from . import agents

__all__ = ["FALLBACK_LINE", "provider_fault_scenarios"]

# The turn ends (1.2 s no-race latency), the reply thinks for the Watchdog's 6 s without a sound
# and is asked again, which fails the same way: after two failed attempts the fallback line
# comes at 1.5 times the no-race latency.
_FALLBACK_BOUND = 1.2 + 2 * 6.0 + 1.5 * 1.2
_DESSERTS = LLMRule(when_user_says="desserts", text="We make a lemon tart.")
# livekit gives a synthesis without frames up after 3 retries (0.1 s, 2 s, 2 s apart): the
# answer, said again then, starts 5.9 s after the caller stopped
_NO_AUDIO_BOUND = 7.0
# a reply of silence plays out (1.4 s) before it is said again: 2.8 s; a TTS 2 s slow to its
# first byte: 3.05 s
_SILENCE_BOUND = 4.0
# the turn ends 0.55 s after the caller stops; SttRecovery waits 2 s more for any transcript,
# then the words recovered from the kept audio are answered
_SILENT_STT_BOUND = 0.55 + 2.0 + 2.0
# the stalled reply thinks for the Watchdog's 6 s and is asked again, which answers
_KEEP_ALIVE_BOUND = 1.2 + 6.0 + 1.5 * 1.2
# a model 3 s slow to its first token: 0.9 s to the end of the turn and 3 s of thinking
_SLOW_LLM_BOUND = 0.55 + 3.0 + 1.0
# livekit retries a refused attempt 0.1 s later, then every 2 s (``max_retry`` 3): refused on
# every attempt, it gives up 4.1 s into the reply, and the line starts 0.15 s later
_REFUSED_BOUND = 0.55 + 0.1 + 2 * 2.0 + 1.0
# refused once: answered 0.1 s late
_REFUSED_ONCE_BOUND = 1.2 + 0.5
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
            name="provider/stt_goes_silent",
            family="provider",
            description=(
                "The STT stream stops answering between the caller's first and second "
                "sentences: open, taking audio, no transcript and no error (a half-open "
                "socket); livekit never reconnects, and every later word is lost."
            ),
            agent=agents.plain_agent,
            utterances=(
                Utterance(1.0, 2.4, "hello is this the restaurant"),
                Utterance(
                    7.0,
                    9.4,
                    "I would like a table for four people tonight",
                    reply_within=_SILENT_STT_BOUND,
                ),
                Utterance(19.0, 20.4, "and do you have parking nearby"),
            ),
            duration=26.0,
            provider_faults=ProviderFaults(stt_silent_at=6.0),
        ),
        Scenario(
            name="control/slow_stt_final",
            family="control",
            description=(
                "The STT sends no interim transcript and its final one 1.5 s after the "
                "caller's last word, after the VAD ended the turn: slow, but live; nothing is "
                "re-transcribed or restarted."
            ),
            agent=agents.plain_agent,
            utterances=(
                Utterance(1.0, 2.4, "hello is this the restaurant", reply_within=_SILENCE_BOUND),
                Utterance(
                    7.0,
                    9.4,
                    "I would like a table for four people tonight",
                    reply_within=_SILENCE_BOUND,
                ),
            ),
            duration=16.0,
            stt_interims=False,
            provider_faults=ProviderFaults(stt_final_after_s=1.5),
            control=True,
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
            name="provider/llm_keeps_alive_without_tokens",
            family="provider",
            description=(
                "The LLM answers the caller's question with a role-only chunk, then an empty "
                "chunk every second and never a token: the stream stays alive (each chunk "
                "resets a client's read timeout), so nothing times out and the caller waits "
                "in silence."
            ),
            agent=agents.plain_agent,
            utterances=(
                Utterance(1.0, 2.5, "do you have parking", reply_within=_KEEP_ALIVE_BOUND),
            ),
            llm=(
                LLMRule(
                    when_user_says="parking",
                    text="Yes, we have free parking.",
                    keeps_alive_before=5.0,
                ),
            ),
            duration=30.0,
        ),
        Scenario(
            name="provider/llm_refuses_every_attempt",
            family="provider",
            description=(
                "The LLM provider answers every attempt of the reply with 503 (overloaded): "
                "livekit retries it three times in 4.1 s, then gives up with an error, and the "
                "caller waits in silence for an answer that never comes."
            ),
            agent=agents.plain_agent,
            utterances=(
                Utterance(1.0, 2.5, "do you have parking", reply_within=_REFUSED_BOUND),
                Utterance(14.0, 15.4, "is the terrace open"),
            ),
            duration=22.0,
            provider_faults=ProviderFaults(
                llm_refused=ConnectRefusals(503, first=4), fallback_line=FALLBACK_LINE
            ),
        ),
        Scenario(
            name="control/llm_refused_once",
            family="control",
            description=(
                "The LLM provider answers the first request with 429 (rate limited, Retry-After "
                "1 s): livekit retries it 0.1 s later and the caller hears the answer; nothing "
                "else is said."
            ),
            agent=agents.plain_agent,
            utterances=(
                Utterance(1.0, 2.5, "do you have parking", reply_within=_REFUSED_ONCE_BOUND),
                Utterance(10.0, 11.4, "is the terrace open", reply_within=_REFUSED_ONCE_BOUND),
            ),
            duration=16.0,
            provider_faults=ProviderFaults(
                llm_refused=ConnectRefusals(429, first=1, retry_after_s=1.0)
            ),
            control=True,
        ),
        Scenario(
            name="control/slow_llm_first_token",
            family="control",
            description=(
                "The LLM takes 3 s to its first token, every request: late but live, the "
                "answer is heard once, and nothing is asked again."
            ),
            agent=agents.plain_agent,
            utterances=(
                Utterance(1.0, 2.5, "do you have parking", reply_within=_SLOW_LLM_BOUND),
                Utterance(12.0, 13.4, "is the terrace open", reply_within=_SLOW_LLM_BOUND),
            ),
            llm=(
                LLMRule(when_user_says="parking", text="Yes, we have free parking.", ttft=3.0),
                LLMRule(when_user_says="terrace", text="Yes, it is open.", ttft=3.0),
            ),
            duration=22.0,
            control=True,
        ),
        Scenario(
            name="provider/tts_returns_no_audio",
            family="provider",
            description=(
                "Every synthesis of the answer ends without a frame: livekit retries it three "
                "times (about 5 s) and drops the reply, with no assistant message; the caller "
                "must hear the answer."
            ),
            agent=agents.plain_agent,
            utterances=(
                Utterance(1.0, 2.4, "what desserts do you make", reply_within=_NO_AUDIO_BOUND),
                Utterance(15.0, 16.4, "is the terrace open"),
            ),
            llm=(_DESSERTS,),
            duration=25.0,
            provider_faults=ProviderFaults(tts_empty_sentence=1),
        ),
        Scenario(
            name="provider/tts_returns_silence",
            family="provider",
            description=(
                "The TTS returns digital silence for the answer: livekit plays it and records "
                "it as said in full; the caller must hear the answer."
            ),
            agent=agents.plain_agent,
            utterances=(
                Utterance(1.0, 2.4, "what desserts do you make", reply_within=_SILENCE_BOUND),
                Utterance(15.0, 16.4, "is the terrace open"),
            ),
            llm=(_DESSERTS,),
            duration=25.0,
            provider_faults=ProviderFaults(tts_silent_sentence=1),
        ),
        Scenario(
            name="control/slow_tts_reply",
            family="control",
            description=(
                "The TTS takes 2 s to its first byte, every sentence: late but audible, the "
                "answer is heard once, and nothing is said again."
            ),
            agent=agents.plain_agent,
            utterances=(
                Utterance(1.0, 2.4, "what desserts do you make", reply_within=_SILENCE_BOUND),
                Utterance(15.0, 16.4, "is the terrace open", reply_within=_SILENCE_BOUND),
            ),
            llm=(_DESSERTS,),
            duration=25.0,
            provider_faults=ProviderFaults(tts_ttfb=2.0),
            control=True,
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
