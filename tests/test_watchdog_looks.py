"""When the Watchdog looks for a stall: on the times of a watch that looked every ``check_every_s``
while something could stall, from the moment it could, but only the looks that can find or note
something; never while nothing can stall (virtual time; the looks are timer callbacks)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
from livekit import rtc
from livekit.agents.voice import events as lk_events
from resilient_agent.middleware.audio_level import AudioLevelMeter
from resilient_agent.middleware.stall_evidence import Stall
from resilient_agent.middleware.watchdog import Watchdog

from resilient_agent import ConversationState, MiddlewareContext
from resilient_agent.testing import run_virtual


def _ctx(state: ConversationState) -> MiddlewareContext:
    session = SimpleNamespace(
        output=SimpleNamespace(audio=None),
        options=SimpleNamespace(transcription_timeout=None),
        current_speech=None,
        vad=None,
    )
    return MiddlewareContext(
        session=cast(Any, session), agent=cast(Any, SimpleNamespace()), state=state, emit=print
    )


class _Looks:
    """Stands in for the evidence's ``find``: records when it is asked, answers as told."""

    def __init__(
        self,
        stall_at: float | None = None,
        raise_at: float | None = None,
        real: Any = None,
    ) -> None:
        self.at: list[float] = []
        self._stall_at = stall_at
        self._raise_at = raise_at
        self._real = real

    def __call__(self, now: float, *args: Any, **kwargs: Any) -> Stall | None:
        self.at.append(round(now, 6))
        if self._real is not None:
            found: Stall | None = self._real(now, *args, **kwargs)
            return found
        if self._raise_at is not None and now >= self._raise_at:
            raise RuntimeError("the evidence broke")
        if self._stall_at is not None and now >= self._stall_at:
            self._stall_at = None
            return Stall("thinking_without_speech", 6.0)
        return None


async def _until(at: float) -> None:
    await asyncio.sleep(at - asyncio.get_running_loop().time())


async def _user_state(watchdog: Watchdog, ctx: MiddlewareContext, new: str) -> None:
    old = ctx.state.user_state
    ctx.state.user_state = cast(Any, new)
    ev = lk_events.UserStateChangedEvent(old_state=cast(Any, old), new_state=cast(Any, new))
    await watchdog.on_user_state(ctx, ev)


async def _agent_state(watchdog: Watchdog, ctx: MiddlewareContext, new: str) -> None:
    old = ctx.state.agent_state
    ctx.state.agent_state = cast(Any, new)
    ev = lk_events.AgentStateChangedEvent(old_state=cast(Any, old), new_state=cast(Any, new))
    await watchdog.on_agent_state(ctx, ev)


def test_looks_come_on_the_check_grid_while_something_can_stall_and_stop_when_nothing_can() -> None:
    async def main() -> tuple[list[float], bool]:
        ctx = _ctx(ConversationState(agent_state="listening"))
        watchdog = Watchdog(check_every_s=0.25)
        await watchdog.setup(ctx)
        looks = _Looks()
        watchdog._evidence.find = looks  # type: ignore[method-assign]
        await _until(1.0)
        await _user_state(watchdog, ctx, "speaking")
        await _until(2.1)  # the caller speaks, no speech is live, no evidence builds up
        await _user_state(watchdog, ctx, "listening")  # nothing can stall from here
        await _until(3.0)
        await _agent_state(watchdog, ctx, "thinking")
        await _until(3.6)
        await _agent_state(watchdog, ctx, "listening")
        await _until(5.0)
        await watchdog.aclose(ctx, "session_end")
        await _until(6.0)  # nothing looks after the close
        return looks.at, watchdog._next_look is None

    at, no_timer_left = run_virtual(main())
    # from each moment something can stall, on a 0.25 s grid, but only the looks that could
    # find or note something: the caller speaks with no speech live and nothing building up
    # (1.25 to 2.0 skipped), the look due at 2.25 would find the call quiet (skipped); the
    # agent's thinking is looked at until a look finds the call quiet, the last until something
    # can stall again
    assert at == [3.25, 3.5, 3.75]
    assert no_timer_left


def _frame(level: int) -> rtc.AudioFrame:
    return rtc.AudioFrame(np.full(800, level, dtype=np.int16).tobytes(), 16000, 1, 800)


class _LookingAllAlong(Watchdog):
    """The watch as it was: a look every ``check_every_s`` while something can stall."""

    def _dormant(self, ctx: MiddlewareContext, speech: Any, speech_live: Any = None) -> bool:
        return False

    def _idle(self, ctx: MiddlewareContext) -> bool:
        return False


@pytest.mark.parametrize("watchdog_class", [Watchdog, _LookingAllAlong])
def test_a_stuck_turn_is_found_at_the_same_time_whether_the_quiet_looks_are_taken_or_not(
    watchdog_class: type[Watchdog],
) -> None:
    async def main() -> tuple[list[float], list[tuple[float, str, float]]]:
        ctx = _ctx(ConversationState(agent_state="listening"))
        watchdog = watchdog_class(check_every_s=0.25)
        await watchdog.setup(ctx)
        meter = AudioLevelMeter()
        meter.notify_quiet(watchdog._line_went_quiet)
        watchdog._evidence.meter = meter
        looks = _Looks(real=watchdog._evidence.find)
        watchdog._evidence.find = looks  # type: ignore[method-assign]
        found: list[tuple[float, str, float]] = []

        async def handle(_ctx: MiddlewareContext, stall: Stall, *_args: Any) -> None:
            found.append((round(asyncio.get_running_loop().time(), 6), stall.kind, stall.for_s))
            await _user_state(watchdog, ctx, "listening")  # the recovery ended the turn

        watchdog._handle = handle  # type: ignore[method-assign,assignment]
        await _until(1.0)
        await _user_state(watchdog, ctx, "speaking")
        loop = asyncio.get_running_loop()
        for tick in range(20, 80):  # 50 ms frames, the voice until 2.05, then a quiet line
            await _until(tick * 0.05)
            meter.on_frame(_frame(3000 if tick <= 41 else 0), loop.time())
        await watchdog.aclose(ctx, "session_end")
        return looks.at, found

    at, found = run_virtual(main())
    # the stuck turn is due 1.2 s (quiet_s) after the quiet began, at 2.1
    assert [(when, kind, round(for_s, 6)) for when, kind, for_s in found] == [
        (3.3, "user_turn_stuck", 1.2)
    ]
    if watchdog_class is Watchdog:
        # no look while the voice lasts; from the quiet on, the grid's looks and the due one
        assert at == [2.25, 2.5, 2.75, 3.0, 3.25, 3.3]
    else:
        assert at == [1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.3]


def test_after_a_recovery_the_next_look_is_a_check_after_it_ends() -> None:
    async def main() -> tuple[list[float], list[float]]:
        ctx = _ctx(ConversationState(agent_state="listening"))
        watchdog = Watchdog(check_every_s=0.25)
        await watchdog.setup(ctx)
        looks = _Looks(stall_at=1.5)
        watchdog._evidence.find = looks  # type: ignore[method-assign]
        handled: list[float] = []

        async def handle(_ctx: MiddlewareContext, stall: Stall, *_args: Any) -> None:
            handled.append(round(asyncio.get_running_loop().time(), 6))
            await asyncio.sleep(1.0)  # a recovery takes its time (escalate_after_s)

        watchdog._handle = handle  # type: ignore[method-assign,assignment]
        await _until(1.0)
        await _agent_state(watchdog, ctx, "thinking")
        await _until(3.1)
        await watchdog.aclose(ctx, "session_end")
        return looks.at, handled

    at, handled = run_virtual(main())
    assert handled == [1.5]
    assert at == [1.25, 1.5, 2.75, 3.0]


def test_a_look_that_fails_ends_the_watch_with_its_error() -> None:
    async def main() -> BaseException | None:
        ctx = _ctx(ConversationState(agent_state="listening"))
        watchdog = Watchdog(check_every_s=0.25)
        await watchdog.setup(ctx)
        watchdog._evidence.find = _Looks(raise_at=1.5)  # type: ignore[method-assign]
        await _agent_state(watchdog, ctx, "thinking")
        await _until(2.0)
        task = watchdog._task
        assert task is not None and task.done()
        error = task.exception()
        with pytest.raises(RuntimeError):
            # as a sleeping watch loop would have raised it
            await watchdog.aclose(ctx, "session_end")
        return error

    error = run_virtual(main())
    assert isinstance(error, RuntimeError) and str(error) == "the evidence broke"
