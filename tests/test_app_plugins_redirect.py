"""An app agent's own provider plugins on a stack: those very instances reach the emulators.

livekit uses an agent's own STT, LLM and TTS over the session's, so a stack that only built its
own plugins would leave the app's pointing at the real providers.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from livekit.agents import Agent, AgentTask, stt

from resilient_agent.lab.catalog import scenarios
from resilient_agent.lab.cli import main
from resilient_agent.lab.run import select
from resilient_agent.testing import run_scenario
from resilient_agent.testing.redirect import NotRedirectable, check_redirects

deepgram = pytest.importorskip("livekit.plugins.deepgram", exc_type=ImportError)
cartesia = pytest.importorskip("livekit.plugins.cartesia", exc_type=ImportError)
openai = pytest.importorskip("livekit.plugins.openai", exc_type=ImportError)
google = pytest.importorskip("livekit.plugins.google", exc_type=ImportError)

_KEY = "app-own-key"


def _own_stt(stack: str) -> Any:
    if stack.startswith("deepgram"):
        return deepgram.STT(model="nova-2-phonecall", language="en-US", api_key=_KEY)
    return openai.STT(model="whisper-1", api_key=_KEY)


def _own_llm(stack: str) -> Any:
    if "+google+" in stack:
        return google.LLM(model="gemini-2.0-flash", api_key=_KEY)
    return openai.LLM(model="gpt-4o-mini", api_key=_KEY)


def _app_class(stack: str, used: list[str]) -> type[Agent]:
    """An app's agent carrying its own plugins, each noting when it did some work."""

    class AppAgent(Agent):
        def __init__(self, instructions: str = "You book tables.", **kwargs: Any) -> None:
            plugins = {
                "stt": _own_stt(stack),
                "llm": _own_llm(stack),
                # at its default 24 kHz, not the lab's 16 kHz
                "tts": cartesia.TTS(model="sonic-2", voice="app-voice", api_key=_KEY),
            }
            for role, plugin in plugins.items():
                plugin.on("metrics_collected", lambda _m, role=role: used.append(role))
            super().__init__(instructions=instructions, **plugins, **kwargs)

    return AppAgent


@pytest.mark.parametrize(
    ("stack", "stt_model", "llm_model"),
    [
        ("deepgram+openai+cartesia", "nova-2-phonecall", "gpt-4o-mini"),
        ("deepgram+google+cartesia", "nova-2-phonecall", "gemini-2.0-flash"),
        ("openai-stt+openai+cartesia", "whisper-1", "gpt-4o-mini"),
    ],
)
def test_the_apps_own_instances_reach_the_emulators_with_their_options(
    stack: str, stt_model: str, llm_model: str
) -> None:
    used: list[str] = []
    call = select(scenarios(), "^control/two_turns$")[0]
    world, outcome = run_scenario(call, _app_class(stack, used), stack=stack)

    assert outcome.passed, outcome.reasons
    assert world.redirected == (
        f"{stack.split('+')[0].replace('-stt', '')}.STT(model={stt_model!r})",
        f"{'google' if 'google' in stack else 'openai'}.LLM(model={llm_model!r})",
        "cartesia.TTS(model='sonic-2')",
    )
    # the app's instances did the work, and the emulators saw their options
    assert {"stt", "llm", "tts"} <= set(used)
    assert world.stt.model == stt_model
    assert world.tts.model == "sonic-2"
    assert world.audio_out.sample_rate == 24_000
    assert [text for _, text, _ in world.stt.finals] == ["do you have a terrace", "great thanks"]
    assert world.tts.sentences == {1: "Sure: do you have a terrace.", 2: "Sure: great thanks."}


class _OwnTransportSTT(deepgram.STT):  # type: ignore[misc]
    async def _recognize_impl(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class _HomeMadeSTT(stt.STT):
    def __init__(self) -> None:
        super().__init__(capabilities=stt.STTCapabilities(streaming=False, interim_results=False))

    async def _recognize_impl(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_a_realtime_model_on_a_pipeline_stack_points_at_the_realtime_stack() -> None:
    agent = Agent(instructions="t", llm=google.realtime.RealtimeModel(api_key=_KEY))
    with pytest.raises(NotRedirectable, match="run a Gemini Live model on --stack gemini-live"):
        check_redirects(agent, "deepgram+google+cartesia", "App")


@pytest.mark.parametrize(
    ("stack", "plugin", "why"),
    [
        (
            "deepgram+openai+cartesia",
            lambda: _OwnTransportSTT(api_key=_KEY),
            "App's own stt test_app_plugins_redirect._OwnTransportSTT(model='nova-3') cannot be "
            "redirected: its class overrides _recognize_impl of deepgram.STT",
        ),
        (
            "deepgram+openai+cartesia",
            _HomeMadeSTT,
            "App's own stt test_app_plugins_redirect._HomeMadeSTT cannot be redirected: the lab "
            "emulates only deepgram.STT,",
        ),
        (
            "openai-stt+openai+cartesia",
            lambda: deepgram.STT(api_key=_KEY),
            "stack 'openai-stt+openai+cartesia' has no deepgram.STT emulator",
        ),
        (
            "deepgram+openai+cartesia",
            lambda: cartesia.TTS(sample_rate=22_050, api_key=_KEY),
            "it asks for 22050 Hz and the emulator's marked audio needs whole 10 ms frames",
        ),
        (
            "openai-stt+openai+cartesia",
            lambda: openai.STT(model="gpt-4o-transcribe", use_realtime=True, api_key=_KEY),
            "it transcribes over OpenAI's realtime websocket",
        ),
    ],
)
def test_an_instance_that_cannot_be_redirected_is_named_with_why(
    stack: str, plugin: Any, why: str
) -> None:
    made = plugin()
    role = "tts" if isinstance(made, cartesia.TTS) else "stt"
    agent = Agent(instructions="t", **{role: made})
    with pytest.raises(NotRedirectable) as refused:
        check_redirects(agent, stack, "App")
    assert why in str(refused.value)
    assert "\n" not in str(refused.value)


_APP = """
from livekit.agents import Agent, function_tool
from livekit.plugins import cartesia, deepgram, google


class WithKeys(Agent):
    @function_tool
    async def opening_hours(self) -> str:
        'When the restaurant opens.'
        return "from noon"

    def __init__(self, instructions: str = "t", **kwargs):
        # no key passed: the plugins read DEEPGRAM_API_KEY / CARTESIA_API_KEY, unset here
        super().__init__(
            instructions=instructions,
            stt=deepgram.STT(model="nova-3"),
            tts=cartesia.TTS(),
            **kwargs,
        )


class Live(Agent):
    @function_tool
    async def track_parcel(self) -> str:
        'Where the parcel is.'
        return "on its way"

    def __init__(self, instructions: str = "t", **kwargs):
        super().__init__(instructions=instructions, llm=google.realtime.RealtimeModel(), **kwargs)


class At22050(Agent):
    def __init__(self, instructions: str = "t", **kwargs):
        super().__init__(instructions=instructions, tts=cartesia.TTS(sample_rate=22050), **kwargs)
"""


def _app_module(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "redirect_app.py").write_text(_APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "redirect_app", raising=False)
    for variable in ("DEEPGRAM_API_KEY", "CARTESIA_API_KEY", "OPENAI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(variable, raising=False)


def test_the_lab_says_which_instances_it_redirected(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _app_module(tmp_path, monkeypatch)
    code = main(
        [
            "lab",
            "--stack",
            "deepgram+openai+cartesia",
            "--agent",
            "redirect_app:WithKeys",
            "--only",
            "^control/two_turns$",
            "--quiet",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    # its tool's probe ran on the stack too (on the scripted providers, its own instances would
    # have gone to the real Deepgram and Cartesia): the tool's windows were found
    assert "tool opening_hours(): windows gap @" in out
    assert (
        "stack deepgram+openai+cartesia: WithKeys's own deepgram.STT(model='nova-3'), "
        "cartesia.TTS(model='sonic-3') redirected to the emulators, their options kept"
    ) in out


def test_an_app_whose_instance_cannot_be_redirected_is_one_line_exit_2(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _app_module(tmp_path, monkeypatch)
    code = main(["lab", "--stack", "deepgram+openai+cartesia", "--agent", "redirect_app:At22050"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""  # before any call
    (line,) = captured.err.strip().splitlines()
    assert (
        "own tts cartesia.TTS(model='sonic-3') cannot be redirected: it asks for 22050 Hz" in line
    )


def _handing_over(specialist: Any) -> type[Agent]:
    """An app's agent with no plugins of its own that hands the call to ``specialist()``.

    It does so 0.2 s into the call, before the caller speaks; the specialist, and its plugins,
    are built then, at call time: the lab never saw them at load.
    """

    class FrontDesk(Agent):
        async def on_enter(self) -> None:
            # livekit switches activities once this agent's start is over
            self._handing_over = asyncio.create_task(self._hand_over())

        async def _hand_over(self) -> None:
            await asyncio.sleep(0.2)
            self.session.update_agent(specialist())

    return FrontDesk


def test_an_agent_handed_over_to_later_has_its_instances_redirected() -> None:
    used: list[str] = []

    class Specialist(Agent):
        def __init__(self) -> None:
            plugins = {
                "llm": openai.LLM(model="gpt-4o-mini", api_key=_KEY),
                # at the call speaker's 16 kHz (the first agent's): see the refusal below
                "tts": cartesia.TTS(
                    model="sonic-2", voice="specialist", sample_rate=16_000, api_key=_KEY
                ),
            }
            for role, plugin in plugins.items():
                plugin.on("metrics_collected", lambda _m, role=role: used.append(role))
            super().__init__(instructions="You know the wine list.", **plugins)

    call = select(scenarios(), "^control/two_turns$")[0]
    world, outcome = run_scenario(call, _handing_over(Specialist), stack="deepgram+openai+cartesia")

    assert outcome.passed, outcome.reasons
    assert world.redirected == (
        "Specialist's own openai.LLM(model='gpt-4o-mini')",
        "Specialist's own cartesia.TTS(model='sonic-2')",
    )
    assert {"llm", "tts"} <= set(used)
    assert world.tts.model == "sonic-2"
    assert world.tts.sentences == {1: "Sure: do you have a terrace.", 2: "Sure: great thanks."}


def test_an_agent_task_with_its_own_instances_has_them_redirected() -> None:
    used: list[str] = []

    class Survey(AgentTask[str]):
        def __init__(self) -> None:
            plugins = {
                "llm": openai.LLM(model="gpt-4o-mini", api_key=_KEY),
                "tts": cartesia.TTS(model="sonic-2", sample_rate=16_000, api_key=_KEY),
            }
            for role, plugin in plugins.items():
                plugin.on("metrics_collected", lambda _m, role=role: used.append(role))
            super().__init__(instructions="Ask about the terrace.", **plugins)

        async def on_user_turn_completed(self, turn_ctx: Any, new_message: Any) -> None:
            self.complete("asked")

    class FrontDesk(Agent):
        async def on_enter(self) -> None:
            self.survey = await Survey()

    call = select(scenarios(), "^control/two_turns$")[0]
    world, outcome = run_scenario(call, FrontDesk, stack="deepgram+openai+cartesia")

    assert outcome.passed, outcome.reasons
    # the front desk, resumed after the task, is not redirected again
    assert world.redirected == (
        "Survey's own openai.LLM(model='gpt-4o-mini')",
        "Survey's own cartesia.TTS(model='sonic-2')",
    )
    assert {"llm", "tts"} <= set(used)
    assert world.agent.survey == "asked"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("stack", "rate", "why"),
    [
        (
            "deepgram+openai+cartesia",
            22_050,
            "Specialist's own tts cartesia.TTS(model='sonic-3') cannot be redirected: it asks "
            "for 22050 Hz",
        ),
        (
            "deepgram+openai+cartesia",
            24_000,
            "Specialist's own tts cartesia.TTS(model='sonic-3') cannot be redirected: it speaks "
            "at 24000 Hz and the call's speaker plays 16000 Hz",
        ),
        (
            None,
            16_000,
            "Specialist's own tts cartesia.TTS(model='sonic-3') would reach the real provider: "
            "run with --stack deepgram+openai+cartesia",
        ),
    ],
)
def test_a_handed_over_instance_that_cannot_be_redirected_fails_the_call_unused(
    stack: str | None, rate: int, why: str
) -> None:
    used: list[str] = []

    class Specialist(Agent):
        def __init__(self) -> None:
            tts = cartesia.TTS(sample_rate=rate, api_key=_KEY)
            tts.on("metrics_collected", lambda _m: used.append("tts"))
            super().__init__(instructions="You know the wine list.", tts=tts)

    call = select(scenarios(), "^control/two_turns$")[0]
    _, outcome = run_scenario(call, _handing_over(Specialist), stack=stack)

    assert not outcome.passed
    (refused,) = [reason for reason in outcome.reasons if "Specialist's own" in reason]
    assert why in refused
    assert "the lab's own tts played its part" in refused
    assert used == []


def test_without_a_stack_an_agent_with_provider_plugins_is_refused_before_any_call(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _app_module(tmp_path, monkeypatch)
    # its plugins read their keys from the environment, unset here: the line names the plugin,
    # not the missing key
    code = main(["lab", "--agent", "redirect_app:WithKeys", "--only", "^control/two_turns$"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""  # before any call
    (line,) = captured.err.strip().splitlines()
    assert (
        "WithKeys's own stt deepgram.STT(model='nova-3') would reach the real provider: run "
        "with --stack deepgram+openai+cartesia (its emulators take the agent's own instances) "
        "or remove the plugin from WithKeys"
    ) in line


def test_without_a_stack_run_scenario_refuses_a_provider_plugin_before_the_call() -> None:
    class App(Agent):
        def __init__(self, instructions: str = "t") -> None:
            super().__init__(
                instructions=instructions, llm=google.LLM(model="gemini-2.0-flash", api_key=_KEY)
            )

    call = select(scenarios(), "^control/two_turns$")[0]
    with pytest.raises(NotRedirectable, match=r"App's own llm google.LLM\(model='gemini-2.0-flash"):
        run_scenario(call, App)


_ENTRYPOINT_APP = """
from livekit.agents import Agent, AgentSession, JobContext
from livekit.plugins import cartesia, deepgram, google


class Assistant(Agent):
    'As the template: the agent brings no models, the entrypoint session does.'

    def __init__(self) -> None:
        super().__init__(instructions="You are a helpful voice assistant.")


async def entrypoint(ctx: JobContext) -> None:
    session = AgentSession(
        stt=deepgram.STT(model="nova-2-phonecall"),
        llm=google.LLM(model="gemini-2.0-flash"),
        tts=cartesia.TTS(model="sonic-2"),
    )
    await session.start(agent=Assistant(), room=ctx.room)
"""


def test_the_session_an_apps_entrypoint_builds_is_never_the_labs(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --agent loads a class; the lab builds the session of every call itself, on the stack's
    # own instances: the entrypoint's plugins (and their options) never reach a call
    from resilient_agent.lab.app_agent import catalog_base
    from resilient_agent.lab.run import load_agent_class
    from resilient_agent.testing.vad import ScriptedVAD

    (tmp_path / "entrypoint_app.py").write_text(_ENTRYPOINT_APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "entrypoint_app", raising=False)
    call = select(scenarios(), "^control/two_turns$")[0]
    # as --agent entrypoint_app:Assistant loads it
    assistant = catalog_base(load_agent_class("entrypoint_app:Assistant")).cls
    world, outcome = run_scenario(call, assistant, stack="deepgram+google+cartesia")

    assert outcome.passed, outcome.reasons
    assert world.redirected == ()
    assert isinstance(world.session.vad, ScriptedVAD)
    assert isinstance(world.session.stt, deepgram.STT)
    assert isinstance(world.session.llm, google.LLM)
    assert isinstance(world.session.tts, cartesia.TTS)
    # the stack's models, not the entrypoint's
    assert (world.stt.model, world.tts.model) == ("nova-3", "sonic-3")
    assert [text for _, text, _ in world.stt.finals] == ["do you have a terrace", "great thanks"]


def test_a_later_agent_on_a_realtime_stack_keeps_only_the_stacks_model() -> None:
    from resilient_agent.testing.redirect import redirect_realtime_plugin

    model = google.realtime.RealtimeModel(api_key=_KEY)
    described = redirect_realtime_plugin("llm", model, lambda _m: True, "Specialist")
    assert described.startswith("google.RealtimeModel(model=")
    with pytest.raises(NotRedirectable) as refused:
        redirect_realtime_plugin("tts", cartesia.TTS(api_key=_KEY), lambda _m: False, "Specialist")
    assert str(refused.value) == (
        "Specialist's own tts cartesia.TTS(model='sonic-3') cannot be redirected: a realtime "
        "stack emulates only its own provider's realtime model (google.realtime.RealtimeModel on "
        "gemini-live, openai.realtime.RealtimeModel on openai-realtime)"
    )


def test_on_a_realtime_stack_an_agent_with_its_own_model_has_no_pipeline_probe(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a tool's probe is a pipeline call, which a realtime stack runs on the lab's scripted
    # providers: the agent's own model would be refused there (or reach Gemini)
    _app_module(tmp_path, monkeypatch)
    code = main(["lab", "--stack", "gemini-live", "--agent", "redirect_app:Live", "--list"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert (
        "Live's own tools are not raced on --stack gemini-live: their calls are pipeline calls, "
        "which a realtime stack leaves out"
    ) in out
