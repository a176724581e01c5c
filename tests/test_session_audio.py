"""SessionAudio: the caller's frames shown to the middleware, session.input.audio the app's own."""

from __future__ import annotations

import asyncio
import copy
import gc
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from livekit import rtc
from livekit.agents import Agent, AgentSession
from livekit.agents.voice.io import AudioInput
from structlog.testing import capture_logs

from resilient_agent import Middleware, MiddlewareContext, ResilientAgent
from resilient_agent._session import session_audio
from resilient_agent._session.audio_observer import AudioObserver
from resilient_agent._session.session_audio import SessionAudio, shown_callbacks
from resilient_agent.lab.catalog import scenarios
from resilient_agent.testing import Scenario, Utterance, run_scenario, run_virtual
from resilient_agent.testing.audio import ScriptedAudioInput


def _frame(value: int) -> rtc.AudioFrame:
    return rtc.AudioFrame(np.full(160, value, dtype=np.int16).tobytes(), 16000, 1, 160)


class Microphone(AudioInput):
    """An app's input: numbered 10 ms frames, with an attribute of its own."""

    def __init__(self, frames: int = 1000, *, label: str = "app-mic") -> None:
        super().__init__(label=label)
        self.gain = 2.0
        self.sent = 0
        self._frames = frames

    async def __anext__(self) -> rtc.AudioFrame:
        if self.sent == self._frames:
            raise StopAsyncIteration
        await asyncio.sleep(0.01)
        self.sent += 1
        return _frame(self.sent)

    def louder(self) -> float:
        return self.gain * 2


@dataclass(eq=False)
class Seen:
    """A callback that keeps the first sample and the time of each frame it is shown."""

    frames: list[tuple[int, float]] = field(default_factory=list)

    def __call__(self, frame: rtc.AudioFrame, now: float) -> None:
        self.frames.append((int(np.frombuffer(frame.data, dtype=np.int16)[0]), now))


class Logged:
    """Stands in for the module's logger: the records it was given, by event."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, dict[str, Any]]] = []

    def _log(self, level: str) -> Any:
        return lambda event, **fields: self.records.append((level, event, fields))

    def __getattr__(self, level: str) -> Any:
        return self._log(level)


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> Logged:
    """The records session_audio logs (whatever logging the app configured)."""
    records = Logged()
    monkeypatch.setattr(session_audio, "logger", records)
    return records


def _session(audio: AudioInput | None) -> AgentSession[None]:
    session: AgentSession[None] = AgentSession()
    session.input.audio = audio
    return session


async def _read(audio: AudioInput, count: int) -> list[int]:
    """What livekit's forward task does: ``async for`` over the input."""
    got: list[int] = []
    async for frame in audio:
        got.append(int(np.frombuffer(frame.data, dtype=np.int16)[0]))
        if len(got) == count:
            break
    return got


def test_the_input_stays_the_apps_object_while_observed() -> None:
    async def main() -> None:
        mic = Microphone()
        session = _session(mic)
        audio = SessionAudio(session)
        assert audio.observe(Seen())
        current = session.input.audio
        assert current is mic
        assert isinstance(current, Microphone) and isinstance(current, AudioInput)
        assert type(current).__name__ == "Microphone"
        assert type(current).__qualname__ == Microphone.__qualname__
        assert type(current).__module__ == Microphone.__module__
        assert repr(current) == "Microphone(label='app-mic', source=None)"
        assert current.label == "app-mic" and current.source is None
        assert mic.gain == 2.0 and mic.louder() == 4.0
        assert vars(mic) == vars(Microphone()) | {"gain": 2.0}
        audio.close()

    run_virtual(main())


def test_frames_reach_the_callbacks_in_order_with_the_loop_time() -> None:
    async def main() -> tuple[list[int], Seen, Seen, float]:
        loop = asyncio.get_running_loop()
        mic = Microphone()
        session = _session(mic)
        audio = SessionAudio(session)
        first, second = Seen(), Seen()
        assert audio.observe(first) and audio.observe(second)
        assert shown_callbacks(mic) == (first, second) == audio.callbacks
        started = loop.time()
        got = await _read(mic, 5)
        audio.close()
        return got, first, second, started

    got, first, second, started = run_virtual(main())
    assert got == [1, 2, 3, 4, 5], "frames pass unchanged"
    assert first.frames == second.frames
    assert [(n, round(at - started, 6)) for n, at in first.frames] == [
        (1, 0.01),
        (2, 0.02),
        (3, 0.03),
        (4, 0.04),
        (5, 0.05),
    ]


class StampedMicrophone(Microphone):
    """A microphone that notes the loop's time as it hands each frame over."""

    def __init__(self) -> None:
        super().__init__()
        self.returned_at: list[float] = []

    async def __anext__(self) -> rtc.AudioFrame:
        frame = await super().__anext__()
        self.returned_at.append(asyncio.get_running_loop().time())
        return frame


def test_frames_carry_the_loop_time_on_an_asyncio_loop() -> None:
    async def main() -> tuple[list[float], list[tuple[float, float]]]:
        loop = asyncio.get_running_loop()
        mic = StampedMicrophone()
        audio = SessionAudio(_session(mic))
        stamps: list[tuple[float, float]] = []
        audio.observe(lambda _frame, now: stamps.append((now, loop.time())))
        await _read(mic, 3)
        audio.close()
        return mic.returned_at, stamps

    returned_at, stamps = asyncio.run(main())
    assert len(stamps) == len(returned_at) == 3
    # bracketed by two reads of the loop's clock, not compared within a tolerance: on a busy
    # machine another thread may hold the GIL for milliseconds between the stamp and the callback
    assert all(
        returned <= now <= shown for returned, (now, shown) in zip(returned_at, stamps, strict=True)
    )


def test_an_iteration_under_way_sees_frames_from_the_next_one() -> None:
    """livekit's forward task is already in its ``async for`` when the middleware start."""

    async def main() -> tuple[list[int], list[int]]:
        mic = Microphone(frames=6)
        session = _session(mic)
        audio = SessionAudio(session)
        seen = Seen()
        read: list[int] = []
        async for frame in mic:
            read.append(int(np.frombuffer(frame.data, dtype=np.int16)[0]))
            if len(read) == 2:
                audio.observe(seen)
            if len(read) == 4:
                audio.stop_observing(seen)
        audio.close()
        return read, [n for n, _ in seen.frames]

    read, shown = run_virtual(main())
    assert read == [1, 2, 3, 4, 5, 6]
    assert shown == [3, 4]


def test_no_audio_input_no_observation() -> None:
    async def main() -> None:
        session = _session(None)
        audio = SessionAudio(session)
        assert not audio.observe(Seen())
        assert session.input.audio is None
        mic = Microphone()
        session.input.audio = mic
        # asked again once there is an input
        assert audio.observe(Seen())
        assert shown_callbacks(mic) and session.input.audio is mic
        audio.close()
        assert not audio.observe(Seen()), "closed: nothing is observed any more"
        assert shown_callbacks(mic) == ()

    run_virtual(main())


def test_close_puts_the_class_back_and_no_frame_is_shown_after() -> None:
    async def main() -> None:
        mic = Microphone()
        session = _session(mic)
        audio = SessionAudio(session)
        seen = Seen()
        audio.observe(seen)
        assert type(mic) is not Microphone
        await _read(mic, 2)
        audio.close()
        assert type(mic) is Microphone
        assert session.input.audio is mic
        assert shown_callbacks(mic) == ()
        await _read(mic, 2)
        assert [n for n, _ in seen.frames] == [1, 2]
        audio.close()  # twice is fine
        assert type(mic) is Microphone

    run_virtual(main())


def test_the_last_callback_leaving_puts_the_class_back() -> None:
    async def main() -> None:
        mic = Microphone()
        audio = SessionAudio(_session(mic))
        one, two = Seen(), Seen()
        audio.observe(one)
        audio.observe(two)
        audio.stop_observing(one)
        assert type(mic) is not Microphone and shown_callbacks(mic) == (two,)
        audio.stop_observing(two)
        assert type(mic) is Microphone, "nobody listens: no frame pays anything"
        audio.stop_observing(two)  # one it does not hold: nothing happens
        audio.observe(one)
        assert type(mic) is not Microphone and shown_callbacks(mic) == (one,)
        audio.close()
        assert type(mic) is Microphone

    run_virtual(main())


def test_a_callback_leaving_from_inside_a_frame_leaves_that_frame_alone() -> None:
    async def main() -> tuple[Seen, list[int]]:
        mic = Microphone()
        audio = SessionAudio(_session(mic))
        after = Seen()
        shown: list[int] = []

        def once(frame: rtc.AudioFrame, now: float) -> None:
            shown.append(len(after.frames))
            audio.stop_observing(once)

        audio.observe(once)
        audio.observe(after)
        await _read(mic, 3)
        audio.close()
        return after, shown

    after, shown = run_virtual(main())
    assert shown == [0]
    assert [n for n, _ in after.frames] == [1, 2, 3]


def test_an_input_replaced_mid_session_is_followed() -> None:
    async def main() -> None:
        first, second = Microphone(label="first"), Microphone(label="second")
        session = _session(first)
        audio = SessionAudio(session)
        seen = Seen()
        audio.observe(seen)
        await _read(first, 2)
        session.input.audio = second  # livekit detaches the first one
        await asyncio.sleep(0)  # one loop turn: livekit's new forward task starts after it
        assert session.input.audio is second
        assert type(first) is Microphone, "the input the session let go has its class back"
        assert type(second) is not Microphone and shown_callbacks(second) == (seen,)
        await _read(second, 2)
        await _read(first, 1)
        assert [n for n, _ in seen.frames] == [1, 2, 1, 2]
        audio.close()
        assert type(second) is Microphone

    run_virtual(main())


def test_an_input_built_on_top_of_the_observed_one_is_left_as_it_is() -> None:
    async def main() -> None:
        mic = Microphone()
        session = _session(mic)
        audio = SessionAudio(session)
        seen = Seen()
        audio.observe(seen)
        top = AudioInput(label="app-chain", source=mic)  # livekit's own chaining
        session.input.audio = top
        await asyncio.sleep(0)
        assert session.input.audio is top and type(top) is AudioInput
        await _read(top, 2)
        assert [n for n, _ in seen.frames] == [1, 2], "each frame passes the observed input once"
        # then replaced by one that does not read through it: followed (mic's detach tells)
        other = Microphone(label="other")
        session.input.audio = other
        await asyncio.sleep(0)
        assert type(mic) is Microphone and shown_callbacks(other) == (seen,)
        audio.close()
        assert type(other) is Microphone

    run_virtual(main())


def test_audio_disabled_then_enabled_keeps_the_observation() -> None:
    async def main() -> None:
        mic = Microphone()
        session = _session(mic)
        audio = SessionAudio(session)
        audio.observe(Seen())
        session.input.set_audio_enabled(False)  # on_detached, the input stays
        await asyncio.sleep(0)
        session.input.set_audio_enabled(True)
        assert session.input.audio is mic and shown_callbacks(mic)
        audio.close()

    run_virtual(main())


def test_input_set_to_none_lets_it_go() -> None:
    """livekit's close sets the session's input to None."""

    async def main() -> None:
        mic = Microphone()
        session = _session(mic)
        audio = SessionAudio(session)
        audio.observe(Seen())
        session.input.audio = None
        await asyncio.sleep(0)
        assert type(mic) is Microphone
        assert audio.observed is None
        audio.close()

    run_virtual(main())


def test_a_second_session_reusing_the_input() -> None:
    async def main() -> None:
        mic = Microphone()
        first_session, second_session = _session(mic), _session(mic)
        first, second = SessionAudio(first_session), SessionAudio(second_session)
        one, two = Seen(), Seen()
        first.observe(one)
        second.observe(two)
        assert shown_callbacks(mic) == (one, two)
        await _read(mic, 1)
        first.close()
        assert type(mic) is not Microphone, "the second session still observes it"
        await _read(mic, 1)
        second.close()
        assert type(mic) is Microphone
        assert [n for n, _ in one.frames] == [1]
        assert [n for n, _ in two.frames] == [1, 2]
        # closed in the other order
        first, second = SessionAudio(first_session), SessionAudio(second_session)
        first.observe(one)
        second.observe(two)
        second.close()
        assert shown_callbacks(mic) == (one,)
        first.close()
        assert type(mic) is Microphone

    run_virtual(main())


def test_one_session_replacing_a_shared_input_leaves_the_other_observing() -> None:
    async def main() -> None:
        mic, other = Microphone(), Microphone(label="other")
        first_session, second_session = _session(mic), _session(mic)
        first, second = SessionAudio(first_session), SessionAudio(second_session)
        one, two = Seen(), Seen()
        first.observe(one)
        second.observe(two)
        first_session.input.audio = other
        await asyncio.sleep(0)
        assert shown_callbacks(mic) == (two,) and shown_callbacks(other) == (one,)
        first.close()
        second.close()
        assert type(mic) is Microphone and type(other) is Microphone

    run_virtual(main())


def test_a_class_swapped_by_someone_else_meanwhile_is_left() -> None:
    async def main() -> type[Any]:
        mic = Microphone()
        audio = SessionAudio(_session(mic))
        audio.observe(Seen())

        class TheirOwn(type(mic)):  # type: ignore[misc]
            __slots__ = ()

        mic.__class__ = TheirOwn
        audio.close()
        return type(mic)

    with capture_logs() as logs:
        assert run_virtual(main()).__name__ == "TheirOwn"
    (left,) = [e for e in logs if e["event"] == "interception_not_restored"]
    assert (left["log_level"], left["interception"]) == ("warning", "AudioInput.__class__")
    assert left["found"].endswith("<locals>.TheirOwn")
    assert "changed by someone else" in left["why"]


class Unswappable(Microphone):
    """An input whose ``__class__`` cannot be assigned (as a C-implemented class refuses it)."""

    @property  # type: ignore[misc]
    def __class__(self) -> type[Any]:
        return type(self)

    @__class__.setter
    def __class__(self, _value: type[Any]) -> None:
        raise TypeError("__class__ assignment only supported for mutable types")


class Final(Microphone):
    """An input whose class refuses subclasses."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError(f"{cls.__name__}: Final may not be subclassed")


class OtherIterator(Microphone):
    """An input that is read through another iterator than itself."""

    def __aiter__(self) -> AsyncIterator[rtc.AudioFrame]:
        return self._frames_of_mine()

    async def _frames_of_mine(self) -> AsyncIterator[rtc.AudioFrame]:
        while True:
            yield await Microphone.__anext__(self)


@pytest.mark.parametrize(
    ("cls", "why"),
    [
        (Unswappable, "its class cannot be swapped: TypeError: __class__ assignment"),
        (Final, "its class cannot be subclassed: TypeError: Final"),
        (OtherIterator, "its __aiter__ returns another iterator"),
    ],
)
def test_a_class_that_refuses_the_swap_is_observed_by_a_wrapper(
    cls: type[Microphone], why: str, logged: Logged
) -> None:
    async def main() -> None:
        mic = cls()
        session = _session(mic)
        audio = SessionAudio(session)
        seen = Seen()
        assert audio.observe(seen)
        ((level, event, fields),) = logged.records
        assert (level, event) == ("info", "audio_observed_by_wrapper")
        assert fields["why"].startswith(why) and fields["audio_input"] == cls.__qualname__
        wrapper = session.input.audio
        assert isinstance(wrapper, AudioObserver) and wrapper.source is mic
        assert type(mic) is cls
        assert shown_callbacks(wrapper) == (seen,)
        assert await _read(wrapper, 3) == [1, 2, 3]
        assert [n for n, _ in seen.frames] == [1, 2, 3]
        # replaced: the next one (a swappable one) is observed in place
        other = Microphone(label="other")
        session.input.audio = other
        await asyncio.sleep(0)
        assert session.input.audio is other and shown_callbacks(other) == (seen,)
        session.input.audio = mic
        await asyncio.sleep(0)
        assert isinstance(session.input.audio, AudioObserver), "wrapped again"
        assert type(other) is Microphone
        audio.close()
        assert session.input.audio is mic, "the wrapper is taken out"

    run_virtual(main())
    assert [event for _, event, _ in logged.records] == ["audio_observed_by_wrapper"] * 2


def test_an_input_that_compares_by_value_is_observed_too() -> None:
    @dataclass
    class Valued(Microphone):
        name: str = "v"

        def __post_init__(self) -> None:
            super().__init__()

    async def main() -> None:
        one, two = Valued(), Valued()
        assert one == two
        first, second = SessionAudio(_session(one)), SessionAudio(_session(two))
        seen_one, seen_two = Seen(), Seen()
        first.observe(seen_one)
        second.observe(seen_two)
        await _read(one, 2)
        await _read(two, 1)
        assert [n for n, _ in seen_one.frames] == [1, 2]
        assert [n for n, _ in seen_two.frames] == [1]
        first.close()
        second.close()
        assert type(one) is Valued and type(two) is Valued

    run_virtual(main())


def test_each_observed_input_has_a_class_of_its_own_and_nothing_is_kept_after() -> None:
    # no registry of observed classes or inputs: the class is made for the input (and leads to
    # its tap), and is garbage once the input has its own class back
    async def main() -> list[weakref.ref[type[Any]]]:
        one, two = Microphone(), Microphone()
        first, second = SessionAudio(_session(one)), SessionAudio(_session(two))
        first.observe(Seen())
        second.observe(Seen())
        assert type(one) is not type(two)
        assert type(one).__qualname__ == type(two).__qualname__ == "Microphone"
        observed = [weakref.ref(type(one)), weakref.ref(type(two))]
        first.close()
        second.close()
        assert type(one) is Microphone and type(two) is Microphone
        return observed

    observed = run_virtual(main())
    gc.collect()
    assert [ref() for ref in observed] == [None, None]


def test_a_copy_of_an_observed_input_is_not_observed() -> None:
    async def main() -> None:
        mic = Microphone()
        audio = SessionAudio(_session(mic))
        seen = Seen()
        audio.observe(seen)
        twin = copy.copy(mic)
        assert await _read(twin, 2) == [1, 2]
        assert seen.frames == [] and shown_callbacks(twin) == ()
        await _read(mic, 1)
        assert [n for n, _ in seen.frames] == [1]
        other = SessionAudio(_session(twin))
        also = Seen()
        other.observe(also)
        await _read(twin, 1)
        assert [n for n, _ in also.frames] == [3] and [n for n, _ in seen.frames] == [1]
        audio.close()
        other.close()
        assert type(mic) is Microphone and type(twin) is Microphone

    run_virtual(main())


# -- in a call -------------------------------------------------------------------------------


class Listener(Middleware):
    """Counts the frames it is shown."""

    def __init__(self) -> None:
        self.frames = 0

    async def setup(self, ctx: MiddlewareContext) -> None:
        assert ctx.observe_audio(self.count)

    def count(self, _frame: rtc.AudioFrame, _at: float) -> None:
        self.frames += 1


def test_in_a_call_the_session_keeps_the_apps_input_and_the_middleware_hear_it() -> None:
    seen: list[Any] = []

    def build(base: type[Agent]) -> Agent:
        class Checking(base):  # type: ignore[valid-type,misc]
            async def on_enter(self) -> None:
                seen.append(self.session.input.audio)
                self._later = asyncio.get_running_loop().create_task(self._look_later())

            async def _look_later(self) -> None:
                for _ in range(3):
                    await asyncio.sleep(0.5)
                    current = self.session.input.audio
                    seen.append(
                        (current is seen[0], isinstance(current, ScriptedAudioInput), repr(current))
                    )

        return Checking(instructions="x")

    listener = Listener()

    class Configured(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, middleware=[listener], **kwargs)

    scenario = Scenario(
        name="t/identity",
        family="t",
        description="",
        agent=build,
        utterances=(Utterance(0.5, 1.5, "hello there"),),
        duration=2.0,
    )
    world, _ = run_scenario(scenario, Configured)
    assert world.agent.middleware[0] is listener
    mine = world.audio_in
    shown = "ScriptedAudioInput(label='ScriptedAudioInput', source=None)"
    assert seen == [mine, (True, True, shown), (True, True, shown), (True, True, shown)]
    assert listener.frames > 150, listener.frames
    assert type(mine) is ScriptedAudioInput, "the session is over: the class is its own again"


def test_after_a_handoff_the_session_keeps_the_apps_input() -> None:
    (scenario,) = [s for s in scenarios() if s.name == "lost_words/typed_during_handoff"]
    world, _ = run_scenario(scenario, ResilientAgent)
    kept = world.recorder.input_audio_kept
    assert kept and all(k for _, k in kept)


class _Notes:
    """Frame notes (``FrameNotes``): frames before ``until`` kept while ``guard`` allows it."""

    def __init__(self) -> None:
        self.until = float("-inf")
        self.guard: Any = None
        self.frames: list[tuple[float, rtc.AudioFrame, bool]] = []
        self.woken: list[tuple[int, float]] = []
        self.calls = 0

    def on_frame(self, frame: rtc.AudioFrame, now: float) -> None:
        self.woken.append((int(np.frombuffer(frame.data, dtype=np.int16)[0]), now))

    def __call__(self, frame: rtc.AudioFrame, now: float) -> None:
        self.calls += 1
        guard = self.guard
        if now < self.until and (guard is None or guard.allow_interruptions):
            self.frames.append((now, frame, False))
        else:
            self.on_frame(frame, now)


class _TwoFramesAllowed:
    """A speech that stops allowing interruptions once two frames were noted."""

    def __init__(self, notes: _Notes) -> None:
        self._notes = notes

    @property
    def allow_interruptions(self) -> bool:
        return len(self._notes.frames) < 2


@pytest.mark.parametrize("cls", [Microphone, Unswappable])
def test_notes_keep_the_frames_before_their_time_while_their_guard_allows_it(
    cls: type[Microphone],
) -> None:
    async def main() -> tuple[_Notes, Seen, float]:
        loop = asyncio.get_running_loop()
        mic = cls()
        session = _session(mic)
        audio = SessionAudio(session)
        notes, seen = _Notes(), Seen()
        assert audio.observe(notes) and audio.observe(seen)
        started = loop.time()
        notes.until = started + 0.045
        notes.guard = _TwoFramesAllowed(notes)
        assert await _read(session.input.audio, 6) == [1, 2, 3, 4, 5, 6]
        audio.close()
        return notes, seen, started

    notes, seen, started = run_virtual(main())
    times = [started + 0.01 * n for n in range(1, 7)]
    # noted until the guard refused; shown to on_frame from then on, and after `until`
    assert [(at, int(np.frombuffer(f.data, dtype=np.int16)[0])) for at, f, _ in notes.frames] == [
        (pytest.approx(times[0]), 1),
        (pytest.approx(times[1]), 2),
    ]
    assert [value for value, _ in notes.woken] == [3, 4, 5, 6]
    assert [at for _, at in notes.woken] == pytest.approx(times[2:])
    # the other callback is shown every frame at the same times
    assert seen.frames == [
        (n, at)
        for n, at in zip(
            range(1, 7), [f[0] for f in notes.frames] + [at for _, at in notes.woken], strict=True
        )
    ]
    # an observed class notes the frames itself; the wrapper calls the notes
    assert notes.calls == (0 if cls is Microphone else 6)
