"""Offline, deterministic race testing for LiveKit voice agents.

Scripted audio in and out, VAD, STT, LLM and TTS that drive a real ``AgentSession`` on a virtual
clock; a scenario model; and the contracts every call is judged by. App developers use it for
their own race tests::

    from resilient_agent.testing import LLMRule, Scenario, Utterance, run_scenario

    world, outcome = run_scenario(my_scenario, MyAgent)
    assert outcome.passed, outcome.reasons
"""

from __future__ import annotations

from .audio import NoiseWindow, PlayoutAudioOutput, ScriptedAudioInput, SpeechWindow
from .clock import VirtualTimeLoop, run_virtual, virtual_time
from .contracts import (
    CallOutcome,
    HeardSentence,
    InputVerdict,
    WordVerdict,
    evaluate,
    heard_sentences,
)
from .job import JobRecorder, recorded_job_context
from .llm import LLMRequest, LLMRule, ScriptedLLM, ToolCallScript
from .realtime import ScriptedRealtimeModel
from .recorder import CallRecorder, LivekitLogCapture
from .refusals import ConnectRefusals
from .runner import CallWorld, run_scenario, run_scenario_async
from .scenario import (
    AgentFactory,
    CallerInput,
    ProviderFaults,
    Scenario,
    Sweep,
    Typed,
    Utterance,
)
from .stt import ScriptedSTT
from .tts import ScriptedTTS
from .vad import ScriptedVAD, VADFault, VADFaultMode

__all__ = [
    "AgentFactory",
    "CallerInput",
    "CallOutcome",
    "CallRecorder",
    "CallWorld",
    "HeardSentence",
    "InputVerdict",
    "JobRecorder",
    "LLMRequest",
    "LLMRule",
    "LivekitLogCapture",
    "NoiseWindow",
    "PlayoutAudioOutput",
    "ProviderFaults",
    "ConnectRefusals",
    "Scenario",
    "ScriptedAudioInput",
    "ScriptedLLM",
    "ScriptedRealtimeModel",
    "ScriptedSTT",
    "ScriptedTTS",
    "ScriptedVAD",
    "SpeechWindow",
    "Sweep",
    "ToolCallScript",
    "Typed",
    "Utterance",
    "VADFault",
    "VADFaultMode",
    "VirtualTimeLoop",
    "WordVerdict",
    "evaluate",
    "heard_sentences",
    "recorded_job_context",
    "run_scenario",
    "run_scenario_async",
    "run_virtual",
    "virtual_time",
]
