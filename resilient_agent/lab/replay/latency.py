"""The providers' latencies the report measured, where the lab's scripted ones would differ.

livekit stamps each assistant message with its TTS's time to first byte (``tts_node_ttfb``)
and each transcribed user message with the STT's delay from the end of speech to its final
transcript (``transcription_delay``). The replay's scripted TTS and STT take 0.15 s and 0.2 s
unless told: a call whose providers took longer on every line, two or more (a slow but live
TTS, an STT that finalizes late) is replayed with their recorded latency, so the agent begins
each line when it did.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ProviderLatency", "provider_latency"]

# the lab's scripted providers, unless told (ScriptedTTS's ttfb, ScriptedSTT's endpoint silence)
_LAB_TTS_TTFB_S = 0.15
_LAB_STT_FINAL_S = 0.2
# latencies within this of each other (or of the lab's) are the same: one 10 ms frame
_SAME_S = 0.011
# a provider's pace takes this many lines measuring it
_MEASURED = 2


@dataclass(frozen=True)
class ProviderLatency:
    """The latencies the replay's providers take (None: the lab's own).

    Attributes:
        tts_ttfb: Seconds the TTS takes to its first byte.
        stt_final_after: Seconds after the caller's last word the STT sends its final.
        assumptions: What was inferred, one line each.
    """

    tts_ttfb: float | None = None
    stt_final_after: float | None = None
    assumptions: tuple[str, ...] = ()


def provider_latency(
    tts_ttfbs: Sequence[float], transcription_delays: Sequence[float]
) -> ProviderLatency:
    """The recorded latencies that differ from the lab's, when every line measured the same."""
    tts = _steady(tts_ttfbs, _LAB_TTS_TTFB_S)
    stt = _steady(transcription_delays, _LAB_STT_FINAL_S)
    assumptions = []
    if tts is not None:
        assumptions.append(
            f"the TTS took {tts:.2f} s to its first byte on every line (tts_node_ttfb): the "
            "replay's TTS takes as long"
        )
    if stt is not None:
        assumptions.append(
            f"the STT sent each final transcript {stt:.2f} s after the caller stopped "
            "(transcription_delay): the replay's STT waits as long"
        )
    return ProviderLatency(tts, stt, tuple(assumptions))


def _steady(values: Sequence[float], lab: float) -> float | None:
    """The one latency ``values`` all measured, when it is not the lab's; else None.

    One measurement is no provider's pace: a turn whose end livekit heard late (a VAD that
    died in it) has a long transcription delay of its own.
    """
    if len(values) < _MEASURED or max(values) - min(values) > _SAME_S:
        return None
    value = round(statistics.median(values), 3)
    return value if abs(value - lab) > _SAME_S else None
