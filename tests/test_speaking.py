"""A line of ours is spoken the way the session can: say(), an instructed realtime reply, or not."""

from __future__ import annotations

from typing import Any

import pytest
from livekit.agents import llm

from resilient_agent import LineCannotBeSpoken
from resilient_agent._session.speaking import say_exactly, way_for
from resilient_agent.testing.tts import ScriptedTTS


class _Realtime(llm.RealtimeModel):
    def __init__(self, *, supports_say: bool, audio_output: bool) -> None:
        super().__init__(
            capabilities=llm.RealtimeCapabilities(
                message_truncation=True,
                turn_detection=True,
                user_transcription=True,
                auto_tool_reply_generation=False,
                audio_output=audio_output,
                manual_function_calls=True,
                supports_say=supports_say,
            )
        )

    def session(self, *, turn_detection_disabled: bool = False) -> Any:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize(
    ("tts", "model", "audio_output", "way"),
    [
        # a TTS speaks it, whatever the model: livekit's say() takes the TTS first
        (ScriptedTTS(), None, True, "say"),
        (ScriptedTTS(), _Realtime(supports_say=False, audio_output=True), True, "say"),
        # a realtime model with say() support
        (None, _Realtime(supports_say=True, audio_output=True), True, "say"),
        # a speech-to-speech model without say(): told to say it
        (None, _Realtime(supports_say=False, audio_output=True), True, "instructed_reply"),
        # text only: nothing to voice, say() writes the transcript
        (None, _Realtime(supports_say=False, audio_output=False), False, "say"),
        # nothing can voice it
        (None, _Realtime(supports_say=False, audio_output=False), True, None),
        (None, None, True, None),
    ],
)
def test_the_way_a_line_is_spoken(tts: Any, model: Any, audio_output: bool, way: Any) -> None:
    assert way_for(tts, model, has_audio_output=audio_output) == way


def test_the_instructions_quote_the_line() -> None:
    assert '"Thank you for calling. Goodbye!"' in say_exactly("Thank you for calling. Goodbye!")


def test_a_line_nothing_can_speak_names_the_fix() -> None:
    error = LineCannotBeSpoken("end_call_tool's farewell")
    assert isinstance(error, RuntimeError)
    assert str(error).startswith("end_call_tool's farewell cannot be spoken")
    assert "Fix: give the session (or the agent) a TTS" in str(error)
