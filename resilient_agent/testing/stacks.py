"""Named stacks of real provider plugins, pointed at the local wire emulators.

``run_scenario(..., stack="deepgram+openai+cartesia")`` runs a pipeline call with the
unmodified ``livekit-plugins-deepgram`` STT, ``livekit-plugins-openai`` LLM and
``livekit-plugins-cartesia`` TTS, each reaching its emulator on loopback with a dummy key
(:mod:`resilient_agent.testing.emulators`). The scenario's VAD stays the lab's, and its LLM rules
are what the LLM emulator serves.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import aiohttp
from livekit.agents import llm, stt, tts

from .._livekit.compat import plugin_options, redirect_realtime_http
from .emulators import (
    CartesiaEmulator,
    DeepgramEmulator,
    DeepgramFaults,
    EmulatorServer,
    GeminiEmulator,
    GeminiLiveEmulator,
    GeminiLiveFaults,
    OpenAIEmulator,
    OpenAIRealtimeEmulator,
    OpenAIRealtimeFaults,
    ScheduledUtterance,
)
from .llm import ScriptedLLM
from .refusals import ConnectRefusals

__all__ = [
    "STACKS",
    "RunningRealtimeStack",
    "RunningStack",
    "StackUnavailable",
    "check_stack",
    "running_realtime_stack",
    "running_stack",
]

# any non-empty key: the emulators do not check it
_KEY = "emulated-key"
_EXTRA = "pip install 'resilient-agent[providers]'"


@dataclass(frozen=True)
class StackSpec:
    """Which plugin plays each part.

    Attributes:
        stt: ``deepgram`` (streaming) or ``openai-stt`` (non-streaming: livekit wraps it in a
            ``StreamAdapter`` with the VAD); a realtime model's name on a realtime stack.
        llm: ``openai`` or ``google``; or a realtime model (``gemini-live``,
            ``openai-realtime``), which hears and
            speaks itself.
        tts: ``cartesia``; a realtime model's name on a realtime stack.
    """

    stt: str
    llm: str
    tts: str

    @property
    def plugins(self) -> tuple[str, ...]:
        """The ``livekit-plugins-*`` distributions it needs."""
        names = {
            "deepgram": "deepgram",
            "openai-stt": "openai",
            "openai": "openai",
            "gemini-live": "google",
            "openai-realtime": "openai",
        }
        parts = (
            names.get(self.stt, self.stt),
            names.get(self.llm, self.llm),
            names.get(self.tts, self.tts),
        )
        return tuple(dict.fromkeys(parts))

    @property
    def streaming_stt(self) -> bool:
        """Whether the STT streams (interim and final transcripts while the caller talks).

        A non-streaming one (``openai-stt``) transcribes each VAD segment once it has ended.
        """
        return self.stt != "openai-stt"

    @property
    def realtime(self) -> str | None:
        """The scenario model a realtime stack plays (``realtime_gemini``), None on a pipeline."""
        return REALTIME_MODELS.get(self.llm)


# a realtime stack's model, and the catalog's scenario model it plays
REALTIME_MODELS: Mapping[str, str] = MappingProxyType(
    {"gemini-live": "realtime_gemini", "openai-realtime": "realtime_openai"}
)


STACKS: Mapping[str, StackSpec] = MappingProxyType(
    {
        "deepgram+openai+cartesia": StackSpec("deepgram", "openai", "cartesia"),
        "deepgram+google+cartesia": StackSpec("deepgram", "google", "cartesia"),
        "openai-stt+openai+cartesia": StackSpec("openai-stt", "openai", "cartesia"),
        "gemini-live": StackSpec("gemini-live", "gemini-live", "gemini-live"),
        "openai-realtime": StackSpec("openai-realtime", "openai-realtime", "openai-realtime"),
    }
)


class StackUnavailable(ValueError):
    """A stack that is not known, or whose plugin is not installed: one line saying which."""


def check_stack(name: str) -> StackSpec:
    """The stack called ``name``, once its plugins are importable.

    Raises:
        StackUnavailable: No such stack (the message lists them), or a plugin is missing (the
            message names the extra to install).
    """
    spec = STACKS.get(name)
    if spec is None:
        raise StackUnavailable(f"unknown stack {name!r}: choose one of {', '.join(STACKS)}")
    for plugin in spec.plugins:
        if importlib.util.find_spec(f"livekit.plugins.{plugin}") is None:
            raise StackUnavailable(
                f"stack {name!r} needs livekit-plugins-{plugin}, which is not installed: {_EXTRA}"
            )
    return spec


@dataclass
class RunningStack:
    """A stack's plugins and the emulators they talk to, for one call.

    Attributes:
        stt: The STT plugin the session uses.
        llm: The LLM plugin the session uses.
        tts: The TTS plugin the session uses.
        heard: The STT emulator (its ``finals``: what reached the provider).
        scripted: The scripted LLM the LLM emulator serves (its ``requests``).
        spoken: The TTS emulator (its ``sentences``).
        servers: Every emulator of the call.
        openai_server: The OpenAI emulator, when the stack has one (its LLM or STT).
        gemini_url: The Gemini emulator's base URL, when the stack's LLM is Google's.
        name: The stack's name (a key of :data:`STACKS`).
    """

    stt: stt.STT[Any]
    llm: llm.LLM[Any]
    tts: tts.TTS[Any]
    heard: DeepgramEmulator | OpenAIEmulator
    scripted: ScriptedLLM
    spoken: CartesiaEmulator
    servers: list[EmulatorServer] = field(default_factory=list)
    openai_server: OpenAIEmulator | None = None
    gemini_url: str | None = None
    name: str = ""

    def connections(self) -> dict[str, int]:
        """Websocket connections and HTTP requests the call opened, by provider and path."""
        return _connections(self.servers)

    def transcript_lag_s(self) -> float:
        """How long after the VAD's end of speech the caller's transcript comes, at most.

        A non-streaming STT is handed each utterance at the VAD's end of speech and answers
        one request later: the call's longest transcription request, as its emulator timed it.
        A streaming STT's final transcript comes before the VAD's end of speech, as the
        scripted STT's does: 0.0.
        """
        if STACKS[self.name].streaming_stt or not isinstance(self.heard, OpenAIEmulator):
            return 0.0
        return self.heard.longest_transcription_s


def _connections(servers: list[EmulatorServer]) -> dict[str, int]:
    """Websocket connections and HTTP requests ``servers`` answered, by provider and path."""
    counts: dict[str, int] = {}
    for server in servers:
        provider = str(getattr(server, "provider", type(server).__name__))
        for path, n in sorted(server.connections.items()):
            counts[f"{provider} ws {path}"] = n
        for path, n in sorted(server.requests.items()):
            # a websocket's upgrade is a request too: the rest are plain HTTP requests
            plain = n - server.connections.get(path, 0)
            if plain:
                counts[f"{provider} http {path}"] = plain
    return counts


@contextlib.asynccontextmanager
async def running_stack(
    name: str,
    *,
    scripted: ScriptedLLM,
    word_lookup: Callable[[int, int], str],
    interim_results: bool = True,
    deepgram_faults: DeepgramFaults | None = None,
    tts_error_on_sentence: int | None = None,
    refused: Mapping[str, ConnectRefusals | None] = MappingProxyType({}),
) -> AsyncIterator[RunningStack]:
    """Start the stack's emulators in the running loop and build its plugins pointed at them.

    Args:
        name: A key of :data:`STACKS`.
        scripted: The scripted LLM the LLM emulator answers with.
        word_lookup: ``(utterance, word)`` to its text, for the STT emulator.
        interim_results: Whether the STT is asked for interim results.
        deepgram_faults: Wire faults of the Deepgram emulator.
        tts_error_on_sentence: Cartesia answers this sentence (1-based, in call order) with an
            error message instead of audio, mid-context.
        refused: By part (``stt``, ``llm``, ``tts``), the connection attempts its provider
            refuses first (429 or 503).

    Raises:
        StackUnavailable: See :func:`check_stack`.
    """
    spec = check_stack(name)
    async with contextlib.AsyncExitStack() as exits:
        http = aiohttp.ClientSession()
        exits.push_async_callback(http.close)

        async def serve(server: Any) -> Any:
            await exits.enter_async_context(server)
            servers.append(server)
            return server

        servers: list[EmulatorServer] = []
        llm_plugin, openai_server = await _llm(spec, scripted, serve)
        # the first emulator served is the LLM's
        llm_server = servers[0]
        llm_paths = ("/v1/chat/completions",) if isinstance(llm_server, OpenAIEmulator) else None
        llm_server.refuse_first(refused.get("llm"), llm_paths)
        heard: DeepgramEmulator | OpenAIEmulator
        stt_plugin: stt.STT[Any]
        if spec.stt == "deepgram":
            from livekit.plugins import deepgram

            heard = await serve(DeepgramEmulator(word_lookup, faults=deepgram_faults))
            stt_plugin = deepgram.STT(
                api_key=_KEY,
                base_url=f"{heard.url}/v1/listen",
                http_session=http,
                interim_results=interim_results,
            )
        else:
            from livekit.plugins import openai

            if openai_server is None:
                openai_server = await serve(OpenAIEmulator(scripted))
            openai_server.word_lookup = word_lookup
            heard = openai_server
            stt_plugin = openai.STT(api_key=_KEY, base_url=openai_server.base_url)
        stt_paths = ("/v1/audio/transcriptions",) if isinstance(heard, OpenAIEmulator) else None
        heard.refuse_first(refused.get("stt"), stt_paths)
        from livekit.plugins import cartesia

        spoken = await serve(CartesiaEmulator(error_on_sentence=tts_error_on_sentence))
        spoken.refuse_first(refused.get("tts"))
        tts_plugin = cartesia.TTS(
            api_key=_KEY, base_url=spoken.url, sample_rate=16_000, http_session=http
        )
        gemini = next((s for s in servers if isinstance(s, GeminiEmulator)), None)
        running = RunningStack(
            stt_plugin,
            llm_plugin,
            tts_plugin,
            heard,
            scripted,
            spoken,
            servers=servers,
            openai_server=openai_server,
            gemini_url=gemini.url if gemini is not None else None,
            name=name,
        )
        try:
            yield running
        finally:
            for plugin in (stt_plugin, tts_plugin, llm_plugin):
                await plugin.aclose()


async def _llm(
    spec: StackSpec, scripted: ScriptedLLM, serve: Callable[[Any], Any]
) -> tuple[llm.LLM[Any], OpenAIEmulator | None]:
    if spec.llm == "google":
        from google.genai import types
        from livekit.plugins import google

        gemini = await serve(GeminiEmulator(scripted))
        plugin = google.LLM(
            model="gemini-2.5-flash",
            api_key=_KEY,
            http_options=types.HttpOptions(base_url=gemini.url),
        )
        return plugin, None
    from livekit.plugins import openai

    server = await serve(OpenAIEmulator(scripted))
    return openai.LLM(model="gpt-4.1", api_key=_KEY, base_url=server.base_url), server


@dataclass
class RunningRealtimeStack:
    """A realtime stack's model and its emulator, for one call.

    Attributes:
        model: livekit's real realtime model, pointed at the emulator.
        emulator: The provider's emulator: what it heard (``finals``) and spoke
            (``sentences``).
        scripted: The scripted LLM it answers from (its ``requests``).
        output_sample_rate: The rate of the model's audio (the lab's output takes it as is).
        servers: Every emulator of the call.
        redirect: Points an app agent's own model of the stack's plugin at the emulator (the
            instance kept, its options with it); False for any other model.
    """

    model: llm.RealtimeModel
    emulator: GeminiLiveEmulator | OpenAIRealtimeEmulator
    scripted: ScriptedLLM
    output_sample_rate: int
    servers: list[EmulatorServer] = field(default_factory=list)
    redirect: Callable[[Any], bool] = lambda _model: False

    def connections(self) -> dict[str, int]:
        """Websocket connections the call opened, by provider and path."""
        return _connections(self.servers)


@contextlib.asynccontextmanager
async def running_realtime_stack(
    name: str,
    *,
    scripted: ScriptedLLM,
    word_lookup: Callable[[int, int], str],
    gemini_live_faults: GeminiLiveFaults | None = None,
    openai_realtime_faults: OpenAIRealtimeFaults | None = None,
    utterances: Sequence[ScheduledUtterance] = (),
    clock: Callable[[], float] | None = None,
) -> AsyncIterator[RunningRealtimeStack]:
    """Start a realtime stack's emulator in the running loop and build the real model for it.

    Gemini Live: the model trusts the emulator's throwaway certificate through its own
    ``http_options`` (``async_client_args["ssl"]``): nothing else in the process does.
    OpenAI Realtime: the model's ``base_url`` is the emulator's; its server VAD names the
    caller's words by ``utterances`` (their spans on ``clock``, the call's).

    Raises:
        StackUnavailable: See :func:`check_stack`.
    """
    spec = check_stack(name)
    if spec.llm == "openai-realtime":
        async with _openai_realtime(scripted, utterances, clock, openai_realtime_faults) as running:
            yield running
        return
    from google.genai import types
    from livekit.plugins import google

    from .emulators.gemini_live import OUTPUT_SAMPLE_RATE

    async with GeminiLiveEmulator(scripted, word_lookup, faults=gemini_live_faults) as emulator:

        def http_options() -> Any:
            # a fresh value each time: the plugin adds its headers to the one it is given
            return types.HttpOptions(
                base_url=emulator.url, async_client_args={"ssl": emulator.tls.client}
            )

        model = google.realtime.RealtimeModel(api_key=_KEY, http_options=http_options())

        def redirect(agent_model: Any) -> bool:
            if not isinstance(agent_model, google.realtime.RealtimeModel):
                return False
            return redirect_realtime_http(agent_model, http_options(), _KEY)

        try:
            yield RunningRealtimeStack(
                model, emulator, scripted, OUTPUT_SAMPLE_RATE, servers=[emulator], redirect=redirect
            )
        finally:
            await model.aclose()


@contextlib.asynccontextmanager
async def _openai_realtime(
    scripted: ScriptedLLM,
    utterances: Sequence[ScheduledUtterance],
    clock: Callable[[], float] | None,
    faults: OpenAIRealtimeFaults | None,
) -> AsyncIterator[RunningRealtimeStack]:
    import asyncio

    from livekit.plugins import openai

    from .emulators.openai_realtime import SAMPLE_RATE

    if clock is None:
        t0 = asyncio.get_running_loop().time()

        def clock() -> float:
            return asyncio.get_running_loop().time() - t0

    async with (
        OpenAIRealtimeEmulator(scripted, utterances, clock, faults=faults) as emulator,
        aiohttp.ClientSession() as http,
    ):
        model = openai.realtime.RealtimeModel(
            api_key=_KEY, base_url=emulator.base_url, http_session=http
        )

        def redirect(agent_model: Any) -> bool:
            if not isinstance(agent_model, openai.realtime.RealtimeModel):
                return False
            # the plugin reads both at each connection; it has no public setter for them
            options = plugin_options(agent_model, "base_url", "api_key", "is_azure")
            if options is None or options.is_azure:
                return False
            options.base_url = emulator.base_url
            options.api_key = _KEY
            return True

        try:
            yield RunningRealtimeStack(
                model, emulator, scripted, SAMPLE_RATE, servers=[emulator], redirect=redirect
            )
        finally:
            await model.aclose()
