"""ModelAudio: when a realtime model's audio stream for a reply ran out, whatever the playout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import pytest
from livekit import rtc

from resilient_agent import ModelAudio
from resilient_agent.testing.clock import run_virtual


def _frame(index: int) -> rtc.AudioFrame:
    return rtc.AudioFrame(
        data=bytes([index]) * 480, sample_rate=24_000, num_channels=1, samples_per_channel=240
    )


async def _model_stream(fail: bool = False) -> AsyncIterator[rtc.AudioFrame]:
    # the model sends three frames 0.1 s apart, faster than they play
    for index in range(3):
        await asyncio.sleep(0.1)
        yield _frame(index)
    if fail:
        raise RuntimeError("socket gone")


async def _node(audio: AsyncIterable[rtc.AudioFrame], model_settings: Any) -> Any:
    async for frame in audio:
        yield frame


def test_the_end_is_noted_when_the_model_ends_the_stream_not_when_it_has_played() -> None:
    async def main() -> tuple[list[int], float | None, float]:
        observed = ModelAudio()
        played = []
        loop = asyncio.get_running_loop()
        async for frame in observed.observe("speech_1", _node, _model_stream(), None):
            played.append(frame.data.tobytes()[0])
            await asyncio.sleep(1.0)  # the output takes frames as fast as they play
        return played, observed.take("speech_1"), loop.time()

    played, ended, done = run_virtual(main())
    assert played == [0, 1, 2]  # every frame, in order
    assert ended == pytest.approx(0.3) and done == pytest.approx(3.1)


def test_a_stream_that_fails_reaches_the_consumer_and_is_not_noted_as_ended() -> None:
    async def main() -> tuple[str, float | None]:
        observed = ModelAudio()
        try:
            async for _ in observed.observe("speech_1", _node, _model_stream(fail=True), None):
                pass
        except RuntimeError as exc:
            return str(exc), observed.take("speech_1")
        return "", observed.take("speech_1")

    assert run_virtual(main()) == ("socket gone", None)
