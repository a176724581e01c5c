"""The audio observer stamps each frame with the loop's own time, whatever the loop."""

from __future__ import annotations

import asyncio

import numpy as np
from livekit import rtc
from livekit.agents.voice.io import AudioInput

from resilient_agent.audio_observer import AudioObserver
from resilient_agent.testing import run_virtual


class _Line(AudioInput):
    def __init__(self, frames: int) -> None:
        super().__init__(label="line")
        self._left = frames

    async def __anext__(self) -> rtc.AudioFrame:
        if not self._left:
            raise StopAsyncIteration
        self._left -= 1
        await asyncio.sleep(0.01)
        return rtc.AudioFrame(np.zeros(160, dtype=np.int16).tobytes(), 16000, 1, 160)


async def _stamps() -> list[tuple[float, float]]:
    loop = asyncio.get_running_loop()
    observer = AudioObserver(_Line(5))
    seen: list[tuple[float, float]] = []
    observer.callbacks.append(lambda _frame, now: seen.append((now, loop.time())))
    async for _ in observer:
        pass
    return seen


def test_frames_carry_the_loop_time_on_asyncio_loops_and_virtual_time() -> None:
    for stamps in (asyncio.run(_stamps()), run_virtual(_stamps())):
        assert len(stamps) == 5
        for now, loop_time in stamps:
            assert abs(now - loop_time) < 1e-3
    # virtual time: exactly the loop's clock, frame after frame
    assert [round(now, 6) for now, _ in run_virtual(_stamps())] == [0.01, 0.02, 0.03, 0.04, 0.05]
