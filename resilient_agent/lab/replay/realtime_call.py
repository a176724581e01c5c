"""A replay plan of a realtime model's call as a lab scenario on the scripted realtime model.

The lab's :class:`~resilient_agent.testing.realtime.ScriptedRealtimeModel` of the recorded
provider hears the caller and answers by the same rules a pipeline replay gives its LLM (the
recorded messages and tool calls, after the recorded delays from the request that asked for
them). The caller says each turn the model transcribed where the model heard it (the turn's
``said``, see :func:`.realtime.speech_window`); a turn it transcribed nothing of is not the
caller's to say (Gemini's server reports the caller speaking as its own reply begins).
"""

from __future__ import annotations

import dataclasses

from ...testing import ProviderFaults, Scenario, Utterance
from ...testing.vad import VADFault
from .plan import ReplayPlan
from .recording import ReplayRecording

__all__ = ["realtime_scenario"]


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
        for t in plan.turns
        if t.heard and t.said is not None
    )
    return dataclasses.replace(
        scenario,
        utterances=utterances,
        model=f"realtime_{plan.realtime}",
        # the model's server detects turns: no VAD of livekit's, no STT or TTS to fail
        vad="scripted",
        vad_fault=VADFault(),
        provider_faults=_model_faults(scenario.provider_faults),
        caller_line="recorded" if recording is not None else "marked",
        caller_recording=recording.caller if recording is not None else None,
        duration=max([scenario.duration, *(u.end + 0.1 for u in utterances)]),
    )


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
