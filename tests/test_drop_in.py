"""Drop-in fidelity (#15 items 2-5): tool errors, the app's audio input, session end, entering."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from livekit import rtc
from livekit.agents import Agent, function_tool
from livekit.agents.voice.events import CloseEvent
from livekit.agents.voice.io import AudioInput
from resilient_agent.middleware import default_middleware
from structlog.testing import capture_logs

from resilient_agent import (
    Middleware,
    MiddlewareContext,
    MiddlewareError,
    MiddlewareErrorEvent,
    ResilientAgent,
)
from resilient_agent._session.audio_observer import AudioObserver
from resilient_agent.lab.catalog import scenarios
from resilient_agent.testing import LLMRule, Scenario, ToolCallScript, Utterance, run_scenario

NOTICE_SCENARIO = "lost_words/over_protected_say"


def catalog(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


def configured(*middleware: Any, **options: Any) -> type[ResilientAgent]:
    class Configured(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, middleware=list(middleware), **options, **kwargs)

    return Configured


# -- (2) tool exceptions ---------------------------------------------------------------------


class PaymentDeclinedError(Exception):
    pass


def _broken_tool_scenario() -> Scenario:
    def build(base: type[Agent]) -> Agent:
        class Broken(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="x")

            @function_tool
            async def book_table(self, time: str) -> str:
                """Book a table.

                Args:
                    time: When.
                """
                raise PaymentDeclinedError("card 4242 declined")

        return Broken()

    return Scenario(
        name="t/broken_tool",
        family="t",
        description="",
        agent=build,
        utterances=(Utterance(1.0, 2.8, "please book a table for eight"),),
        llm=(
            LLMRule(
                when_user_says="book",
                tool_calls=(ToolCallScript("book_table", {"time": "eight"}),),
            ),
            LLMRule(text="Sorry, that did not work.", after_tool="book_table"),
        ),
        duration=10.0,
    )


def _tool_outputs(world: Any) -> list[tuple[str, bool]]:
    items = world.session.history.items
    return [(i.output, i.is_error) for i in items if i.type == "function_call_output"]


def _livekit_errors(world: Any) -> list[str]:
    return [message for _, level, message in world.logs.records if level >= 40]


def test_an_unexpected_tool_exception_is_handled_exactly_as_livekit_handles_it() -> None:
    plain, _ = run_scenario(_broken_tool_scenario(), Agent)
    resilient, _ = run_scenario(_broken_tool_scenario(), ResilientAgent)
    assert _tool_outputs(resilient) == _tool_outputs(plain)
    ((output, is_error),) = _tool_outputs(resilient)
    assert is_error and "PaymentDeclinedError" not in output
    # livekit's own ERROR record is there, as with a plain Agent (alerts keyed on it still fire)
    assert _livekit_errors(plain) and _livekit_errors(resilient) == _livekit_errors(plain)


def test_a_friendlier_tool_error_is_an_explicit_option_without_internals() -> None:
    agent_class = configured(*default_middleware(), tool_error_message="{tool} did not work.")
    with capture_logs() as logs:
        world, _ = run_scenario(_broken_tool_scenario(), agent_class)
    assert _tool_outputs(world) == [("book_table did not work.", True)]
    (failed,) = [r for r in logs if r["event"] == "tool_failed"]
    assert failed["log_level"] == "error" and failed["tool"] == "book_table"


@pytest.mark.parametrize("message", [3, "{tool} failed: {error}", "{0}", "{tool"])
def test_a_bad_tool_error_message_is_refused_at_construction(message: Any) -> None:
    with pytest.raises(MiddlewareError, match="tool_error_message"):
        ResilientAgent(instructions="x", tool_error_message=message)


# -- (3) the app's audio input ---------------------------------------------------------------


class AppMicrophone(AudioInput):
    """An app's own input with an attribute of its own."""

    def __init__(self, source: AudioInput) -> None:
        super().__init__(label="app-microphone", source=source)
        self.gain = 2.0


class Listener(Middleware):
    """Counts the caller's frames it is shown, by call second."""

    def __init__(self) -> None:
        self.frames_at: list[float] = []

    async def setup(self, ctx: MiddlewareContext) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        ctx.observe_audio(lambda _frame, at: self.frames_at.append(at - started))


def _swapping_agent(seen: dict[str, Any]) -> Any:
    def build(base: type[Agent]) -> Agent:
        class Swapping(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="x")

            async def on_enter(self) -> None:
                self._swap = asyncio.get_running_loop().create_task(self._swap_later())

            async def _swap_later(self) -> None:
                await asyncio.sleep(0.5)
                scripted = self.session.input.audio
                assert scripted is not None
                mine = AppMicrophone(scripted)
                self.session.input.audio = mine
                await asyncio.sleep(0.1)
                now = self.session.input.audio
                seen["is_mine"] = now is mine
                seen["gain"] = getattr(now, "gain", None)
                seen["label"] = now.label if now is not None else None

        return Swapping()

    return build


def test_the_app_swapping_its_audio_input_keeps_the_middleware_hearing() -> None:
    seen: dict[str, Any] = {}
    listener = Listener()
    scenario = Scenario(
        name="t/swap_input",
        family="t",
        description="",
        agent=_swapping_agent(seen),
        utterances=(Utterance(1.0, 2.0, "hello there"),),
        duration=4.0,
    )
    world, _ = run_scenario(scenario, configured(listener))
    live = world.agent.middleware[0]
    assert isinstance(live, Listener)
    assert seen == {"is_mine": True, "gain": 2.0, "label": "app-microphone"}
    after_swap = [t for t in live.frames_at if t > 1.0]
    assert len(after_swap) > 100, "frames stopped reaching the middleware after the swap"


def test_no_middleware_needs_audio_so_the_input_is_left_alone() -> None:
    inputs: list[Any] = []

    def build(base: type[Agent]) -> Agent:
        class Looking(base):  # type: ignore[valid-type,misc]
            async def on_enter(self) -> None:
                inputs.append(self.session.input.audio)

        return Looking(instructions="x")

    scenario = Scenario(
        name="t/none", family="t", description="", agent=build, utterances=(), duration=1.0
    )
    world, _ = run_scenario(scenario, configured())
    assert inputs == [world.audio_in]


# -- (4) on_session_end ----------------------------------------------------------------------


class EndWatcher(Middleware):
    def __init__(self) -> None:
        self.ended: list[CloseEvent] = []
        self.closed = False

    async def on_session_end(self, ctx: MiddlewareContext, ev: CloseEvent) -> None:
        assert not self.closed, "on_session_end must come before aclose"
        self.ended.append(ev)

    async def aclose(self) -> None:
        self.closed = True


@pytest.mark.parametrize("name", ["control/two_turns", "control/end_call_farewell_heard"])
def test_on_session_end_is_dispatched_with_livekits_close_event(name: str) -> None:
    world, _ = run_scenario(catalog(name), configured(EndWatcher()))
    (watcher,) = world.agent.middleware
    assert isinstance(watcher, EndWatcher)
    assert len(watcher.ended) == 1 and isinstance(watcher.ended[0], CloseEvent)
    assert watcher.closed


def test_a_handoff_does_not_end_the_session_for_the_old_agents_middleware() -> None:
    scenario = catalog("lost_words/during_handoff")
    world, outcome = run_scenario(scenario, configured(EndWatcher(), *default_middleware()))
    # the words said during the handoff are carried to the next agent, not dropped as if the
    # session had ended
    assert outcome.passed, outcome.reasons
    (first,) = [m for m in world.agent.middleware if isinstance(m, EndWatcher)]  # type: ignore[attr-defined]
    assert first.ended == [] and first.closed


# -- (5) entering never fails as a whole -----------------------------------------------------


class BadSetup(Middleware):
    position = "first"

    async def setup(self, ctx: MiddlewareContext) -> None:
        raise RuntimeError("cannot reach the metrics server")

    async def on_user_state(self, ctx: MiddlewareContext, ev: Any) -> None:
        raise AssertionError("a middleware whose setup failed must not run")


def _errors_seen(agent_class: type[ResilientAgent]) -> tuple[type[ResilientAgent], list[Any]]:
    seen: list[MiddlewareErrorEvent] = []

    class Listening(agent_class):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.events.on("middleware_error", seen.append)

    return Listening, seen


def test_a_failing_setup_costs_that_middleware_only() -> None:
    scenario = catalog(NOTICE_SCENARIO)
    agent_class, seen = _errors_seen(configured(BadSetup(), *default_middleware()))
    with capture_logs() as logs:
        world, outcome = run_scenario(scenario, agent_class)
    # the app's on_enter ran (the protected notice played) and the race was still handled
    assert outcome.passed, outcome.reasons
    assert outcome.lost_words == 0
    assert ("speech_withheld_from_stt", "recovered_words") in {
        (e["kind"], e["action"]) for e in outcome.race_events
    }
    assert [(e.middleware, e.hook, e.action) for e in seen] == [
        ("BadSetup", "setup", "disabled_for_session")
    ]
    report = world.agent.call_report  # type: ignore[attr-defined]
    assert report is not None and report.middleware_errors == ["BadSetup.setup"]
    (record,) = [r for r in logs if r["event"] == "middleware_error"]
    assert record["middleware"] == "BadSetup"
    assert "BadSetup" not in [m.display_name for m in world.agent.middleware]  # type: ignore[attr-defined]


class _StandInJob:
    """A test harness's job context: no ``job``, no ``room``."""


def test_a_stand_in_job_context_costs_the_log_fields_only(monkeypatch: Any) -> None:
    import resilient_agent._session.event_hub as event_hub_module

    monkeypatch.setattr(event_hub_module, "get_job_context", lambda: _StandInJob())
    agent_class, seen = _errors_seen(ResilientAgent)
    with capture_logs() as logs:
        world, outcome = run_scenario(catalog(NOTICE_SCENARIO), agent_class)
    assert outcome.passed and outcome.lost_words == 0
    assert [(e.middleware, e.hook) for e in seen] == [("ResilientAgent", "log_fields")]
    report = world.agent.call_report  # type: ignore[attr-defined]
    assert report is not None and report.middleware_errors == ["ResilientAgent.log_fields"]
    races = [r for r in logs if r["event"] == "race_handled"]
    assert races and all("call_id" in r for r in races)


def test_the_app_on_enter_runs_even_when_the_chain_cannot_start(monkeypatch: Any) -> None:
    from resilient_agent._session.runtime import SessionRuntime

    def broken_start(self: SessionRuntime) -> None:
        raise RuntimeError("runtime broken")

    monkeypatch.setattr(SessionRuntime, "start", broken_start)
    entered: list[bool] = []

    def build(base: type[Agent]) -> Agent:
        class Entering(base):  # type: ignore[valid-type,misc]
            async def on_enter(self) -> None:
                entered.append(True)

        return Entering(instructions="x")

    agent_class, seen = _errors_seen(ResilientAgent)
    scenario = Scenario(
        name="t/enter", family="t", description="", agent=build, utterances=(), duration=1.0
    )
    run_scenario(scenario, agent_class)
    assert entered == [True]
    assert [(e.middleware, e.hook, e.action) for e in seen] == [
        ("ResilientAgent", "enter", "ran_without_middleware")
    ]


def test_frames_are_shown_unchanged() -> None:
    frame = rtc.AudioFrame(b"\x01\x00" * 160, 16000, 1, 160)

    class One(AudioInput):
        async def __anext__(self) -> rtc.AudioFrame:
            return frame

    async def read() -> rtc.AudioFrame:
        observer = AudioObserver(One(label="mic"))
        shown: list[rtc.AudioFrame] = []
        observer.callbacks.append(lambda f, _at: shown.append(f))
        got = await observer.__anext__()
        assert shown == [got] and observer.label == "mic"
        return got

    assert asyncio.run(read()) is frame
