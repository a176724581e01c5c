"""Fails loudly when livekit moves a private name resilient-agent depends on."""

from __future__ import annotations

import asyncio

from livekit.agents.voice.speech_handle import SpeechHandle

from resilient_agent._compat import speech_interrupted_future, speech_scheduled_future


def test_speech_handle_futures_are_where_compat_expects_them() -> None:
    async def check() -> None:
        handle = SpeechHandle.create(allow_interruptions=True)
        scheduled = speech_scheduled_future(handle)
        interrupted = speech_interrupted_future(handle)
        assert scheduled is not None, "livekit moved SpeechHandle._scheduled_fut"
        assert interrupted is not None, "livekit moved SpeechHandle._interrupt_fut"
        assert not interrupted.done()
        handle.interrupt()
        assert interrupted.done() and handle.interrupted

    asyncio.run(check())
