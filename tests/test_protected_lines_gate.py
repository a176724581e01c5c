"""ProtectedLineGate: the app's protected say/generate_reply on a session, realtime or not."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from livekit.agents.voice.speech_handle import SpeechHandle

from resilient_agent._livekit.interception import Interceptor
from resilient_agent._livekit.protected_lines import ProtectedLineGate
from resilient_agent.testing.realtime import ScriptedRealtimeModel


class _PipelineAgent:
    @property
    def realtime_llm_session(self) -> Any:
        raise RuntimeError("no realtime session")  # as livekit's Agent raises on a pipeline


class _Session:
    """Stands in for an AgentSession: records the calls, returns interruptible handles."""

    def __init__(self, *, server_turns: bool | None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.current_agent: Any = _PipelineAgent()
        if server_turns is not None:
            model = ScriptedRealtimeModel(flavour="openai", turn_detection=server_turns)
            rt = SimpleNamespace(realtime_model=model)
            self.current_agent = SimpleNamespace(realtime_llm_session=rt)

    def say(self, text: str, **kwargs: Any) -> SpeechHandle:
        return self._made("say", kwargs)

    def generate_reply(self, **kwargs: Any) -> SpeechHandle:
        return self._made("generate_reply", kwargs)

    def _made(self, how: str, kwargs: dict[str, Any]) -> SpeechHandle:
        self.calls.append((how, kwargs))
        # livekit drops allow_interruptions=False under server turn detection
        return SpeechHandle.create(allow_interruptions=True)


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["say", "generate_reply"])
async def test_a_protected_line_under_server_turns_is_made_without_the_argument_and_protected(
    how: str,
) -> None:
    session = _Session(server_turns=True)
    gates = Interceptor()
    ProtectedLineGate(session).install(gates)  # type: ignore[arg-type]
    args = ("Hello",) if how == "say" else ()
    handle = getattr(session, how)(*args, allow_interruptions=False)
    assert session.calls == [(how, {})]  # livekit never sees the argument it would drop
    assert handle.allow_interruptions is False
    gates.restore_all()
    assert "say" not in vars(session) and "generate_reply" not in vars(session)


@pytest.mark.asyncio
@pytest.mark.parametrize("server_turns", [False, None])
async def test_without_server_turns_every_call_goes_to_livekit_unchanged(
    server_turns: bool | None,
) -> None:
    session = _Session(server_turns=server_turns)
    ProtectedLineGate(session).install(Interceptor())  # type: ignore[arg-type]
    session.say("Hello", allow_interruptions=False)
    session.generate_reply(instructions="x")
    assert session.calls == [
        ("say", {"allow_interruptions": False}),
        ("generate_reply", {"instructions": "x"}),
    ]
