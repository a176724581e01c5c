"""The audio observers (in place, and the wrapping fallback): frames stamped with the loop's
own time, callbacks that come and go."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from livekit import rtc
from livekit.agents import Agent
from livekit.agents.voice.io import AudioInput
from resilient_agent.middleware.audio_level import AudioLevelMeter

from resilient_agent import Middleware, MiddlewareContext, ResilientAgent
from resilient_agent._session.audio_observer import AudioObserver
from resilient_agent._session.session_audio import shown_callbacks
from resilient_agent.testing import Scenario, Utterance, run_scenario, run_virtual


class _Line(AudioInput):
    def __init__(self, frames: int) -> None:
        super().__init__(label="line")
        self._left = frames
        self.returned_at: list[float] = []

    async def __anext__(self) -> rtc.AudioFrame:
        if not self._left:
            raise StopAsyncIteration
        self._left -= 1
        await asyncio.sleep(0.01)
        self.returned_at.append(asyncio.get_running_loop().time())
        return rtc.AudioFrame(np.zeros(160, dtype=np.int16).tobytes(), 16000, 1, 160)


async def _stamps() -> list[tuple[float, float, float]]:
    """Each frame's stamp between the loop's time as the input returned it and as it was shown."""
    loop = asyncio.get_running_loop()
    line = _Line(5)
    observer = AudioObserver(line)
    seen: list[tuple[float, float]] = []
    observer.callbacks.append(lambda _frame, now: seen.append((now, loop.time())))
    async for _ in observer:
        pass
    return [
        (returned, now, shown)
        for returned, (now, shown) in zip(line.returned_at, seen, strict=True)
    ]


def test_frames_carry_the_loop_time_on_asyncio_loops_and_virtual_time() -> None:
    # bracketed by two reads of the loop's clock, not compared within a tolerance: on a busy
    # machine another thread may hold the GIL for milliseconds between the stamp and the callback
    for stamps in (asyncio.run(_stamps()), run_virtual(_stamps())):
        assert len(stamps) == 5
        assert all(returned <= now <= shown for returned, now, shown in stamps)
    # virtual time: exactly the loop's clock, frame after frame
    assert [round(now, 6) for _, now, _ in run_virtual(_stamps())] == [
        0.01,
        0.02,
        0.03,
        0.04,
        0.05,
    ]


class _ComingAndGoing(Middleware):
    """Watches the caller's audio, stops after 10 frames (from inside its own callback)."""

    def __init__(self) -> None:
        self.all_frames = 0
        self.first_ten = 0
        self.meter: AudioLevelMeter | None = None
        self.metered_while_wanted = False
        self.meter_shown_frames: list[bool] = []

    async def setup(self, ctx: MiddlewareContext) -> None:
        def count(_frame: rtc.AudioFrame, _at: float) -> None:
            self.all_frames += 1

        def ten(_frame: rtc.AudioFrame, _at: float) -> None:
            self.first_ten += 1
            if self.first_ten == 10:
                ctx.stop_observing_audio(ten)

        assert ctx.observe_audio(ten)
        assert ctx.observe_audio(count)
        self.meter = AudioLevelMeter.of(ctx)
        assert self.meter is not None
        self._watch = asyncio.get_running_loop().create_task(self._want_meter_a_while(ctx))

    async def _want_meter_a_while(self, ctx: MiddlewareContext) -> None:
        meter = self.meter
        assert meter is not None
        audio = ctx.session.input.audio
        assert audio is not None and not isinstance(audio, AudioObserver)

        def shown() -> None:
            self.meter_shown_frames.append(meter.on_frame in shown_callbacks(audio))

        await asyncio.sleep(1.2)
        shown()
        meter.want("test", True)
        shown()
        await asyncio.sleep(0.8)  # the caller speaks from 1.0 s to 2.5 s
        meter.want("test", False)
        shown()
        self.metered_while_wanted = meter.voice_heard


def test_a_callback_stops_being_shown_frames_and_the_meter_only_while_wanted() -> None:
    def build(base: type[Agent]) -> Agent:
        return base(instructions="x")

    class Configured(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, middleware=[_ComingAndGoing()], **kwargs)

    scenario = Scenario(
        name="t/coming_and_going",
        family="t",
        description="",
        agent=build,
        utterances=(Utterance(1.0, 2.5, "hello there"),),
        duration=4.0,
    )
    world, _ = run_scenario(scenario, Configured)
    assert isinstance(world.agent, ResilientAgent)
    live = world.agent.middleware[0]
    assert isinstance(live, _ComingAndGoing)
    assert live.first_ten == 10
    assert live.all_frames > 300, "the other callback must keep seeing every frame"
    assert live.metered_while_wanted, "the meter heard the caller while it was wanted"
    assert live.meter_shown_frames == [False, True, False]
    meter = live.meter
    assert meter is not None and not meter.metering
    # the caller spoke until 2.5 s; the meter, no longer shown frames, last heard them by 2.0 s
    heard = meter.loud_at(300.0) - world.t0
    assert 1.2 <= heard <= 2.05, heard
