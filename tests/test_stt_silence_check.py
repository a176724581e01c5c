"""SttRecovery's silence check: a timer only for a speech the STT has not transcribed yet."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from livekit.agents.voice import events as lk_events
from resilient_agent.middleware.stt_recovery import SttRecovery

from resilient_agent import ConversationState, MiddlewareContext
from resilient_agent.testing import run_virtual


def _user_state(recovery: SttRecovery, old: str, new: str) -> None:
    ev = lk_events.UserStateChangedEvent(old_state=cast(Any, old), new_state=cast(Any, new))
    recovery._on_user_state(ev)


def _transcript(recovery: SttRecovery) -> None:
    recovery._on_transcript(lk_events.UserInputTranscribedEvent(transcript="hello", is_final=False))


def test_a_speech_transcribed_before_it_ends_arms_no_silence_check() -> None:
    async def main() -> tuple[bool, bool, bool]:
        recovery = SttRecovery()
        recovery._ctx = MiddlewareContext(
            session=cast(Any, SimpleNamespace(current_speech=None)),
            agent=cast(Any, SimpleNamespace()),
            state=ConversationState(),
            emit=print,
        )
        _user_state(recovery, "listening", "speaking")
        await asyncio.sleep(0.5)
        _transcript(recovery)
        await asyncio.sleep(0.5)
        _user_state(recovery, "speaking", "listening")
        transcribed_armed = recovery._silence_check is not None
        # a speech without a word yet may be a deaf stream's: it is checked silent_s later
        _user_state(recovery, "listening", "speaking")
        await asyncio.sleep(1.0)
        _user_state(recovery, "speaking", "listening")
        untranscribed_armed = recovery._silence_check is not None
        # a transcript before the next speech ends: the check armed for it is dropped
        _user_state(recovery, "listening", "speaking")
        _transcript(recovery)
        _user_state(recovery, "speaking", "listening")
        return transcribed_armed, untranscribed_armed, recovery._silence_check is not None

    assert run_virtual(main()) == (False, True, False)
