"""An app agent's own provider plugins, pointed at a stack's emulators with their options kept.

An app's agent often carries its own ``deepgram.STT(model="nova-3")``, ``openai.LLM``,
``google.LLM`` or ``cartesia.TTS`` (``Agent(stt=..., llm=..., tts=...)``); livekit then uses
those instances, not the session's. On a stack (``lab --stack NAME --agent myapp:MyAgent``,
``run_scenario(..., stack=...)``) the lab points those very instances at the stack's emulators,
so the app's model, voice and language reach the wire. An instance it cannot point there (a
plugin with no emulator, a subclass with a transport of its own, a provider the stack does not
play) is refused with one line naming it and why, before any call runs.

Without a stack the lab's calls run on scripted providers, and an agent's own provider plugin
would take their place and reach the real provider: it is refused the same way, naming the stack
that would take it (:func:`refuse_provider_plugins`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from livekit.agents import Agent, llm, stt
from livekit.agents.utils import http_context, is_given

from .._livekit.compat import plugin_client, plugin_options

if TYPE_CHECKING:
    from .stacks import RunningStack, StackSpec

__all__ = [
    "NotRedirectable",
    "app_http_context",
    "check_redirects",
    "close_app_plugins",
    "close_plugins",
    "has_own_plugins",
    "own_plugins",
    "redirect_app_plugins",
    "redirect_plugin",
    "redirect_realtime_plugin",
    "refuse_provider_plugin",
    "refuse_provider_plugins",
]


class NotRedirectable(ValueError):
    """An app's plugin instance the lab cannot point at its emulator: one line saying which."""


@dataclass(frozen=True)
class _Plugin:
    """A provider plugin class the lab can redirect.

    Attributes:
        module: The ``livekit.plugins`` module.
        cls: The class name in it.
        role: ``stt``, ``llm`` or ``tts``: the stack's part it plays.
        stack_part: The value of that part on a stack that has its emulator.
        transport: The methods that carry its wire: a subclass overriding one has its own.
    """

    module: str
    cls: str
    role: str
    stack_part: str
    transport: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.module}.{self.cls}"


_PLUGINS = (
    _Plugin("deepgram", "STT", "stt", "deepgram", ("stream", "_recognize_impl", "_ensure_session")),
    _Plugin("openai", "STT", "stt", "openai-stt", ("stream", "_recognize_impl")),
    _Plugin("openai", "LLM", "llm", "openai", ("chat",)),
    _Plugin("google", "LLM", "llm", "google", ("chat",)),
    _Plugin("cartesia", "TTS", "tts", "cartesia", ("synthesize", "stream", "_ensure_session")),
)


def _class_of(plugin: _Plugin) -> type | None:
    import importlib

    try:
        module = importlib.import_module(f"livekit.plugins.{plugin.module}")
    except ImportError:
        return None
    found = getattr(module, plugin.cls, None)
    return found if isinstance(found, type) else None


def _describe(obj: object) -> str:
    cls = type(obj)
    module = cls.__module__
    short = (
        f"{module.split('.')[2]}.{cls.__qualname__}"
        if module.startswith("livekit.plugins.")
        else f"{module}.{cls.__qualname__}"
    )
    model = getattr(obj, "model", None)
    known = isinstance(model, str) and model not in ("", "unknown")
    return f"{short}(model={model!r})" if known else short


def own_plugins(agent: Agent) -> list[tuple[str, Any]]:
    """The agent's own STT, LLM and TTS, by role (a StreamAdapter's wrapped plugin for it)."""
    found = []
    for role in ("stt", "llm", "tts"):
        value = getattr(agent, role)
        if value is None or not is_given(value):
            continue
        if isinstance(value, stt.StreamAdapter):
            value = value.wrapped_stt
        found.append((role, value))
    return found


def has_own_plugins(agent: Agent) -> bool:
    """Whether the agent carries its own STT, LLM or TTS (livekit uses it over the session's)."""
    return bool(own_plugins(agent))


def _which(obj: object) -> _Plugin | None:
    for plugin in _PLUGINS:
        cls = _class_of(plugin)
        if cls is not None and isinstance(obj, cls):
            return plugin
    return None


def _refusal(label: str, role: str, obj: object, spec: StackSpec, stack: str) -> str | None:
    """Why ``obj`` cannot be pointed at the stack's emulator, None when it can."""
    what = f"{label}'s own {role} {_describe(obj)}"
    if spec.realtime is not None:
        name, classes = _realtime_model(spec.llm)
        if not isinstance(obj, classes):
            return f"{what} cannot be redirected: stack {stack!r} emulates only {name}"
        if spec.llm == "openai-realtime":
            options = plugin_options(obj, "base_url", "api_key", "is_azure")
            if options is None:
                return f"{what} cannot be redirected: livekit-plugins-openai moved its endpoint"
            if options.is_azure:
                return f"{what} cannot be redirected: an Azure realtime model has no emulator"
        return None
    if isinstance(obj, llm.RealtimeModel):
        return (
            f"{what} cannot be redirected: a realtime model has no place on a pipeline stack; "
            "run a Gemini Live model on --stack gemini-live, an OpenAI Realtime model on "
            "--stack openai-realtime"
        )
    plugin = _which(obj)
    if plugin is None or plugin.role != role:
        return (
            f"{what} cannot be redirected: the lab emulates only "
            f"{', '.join(p.name for p in _PLUGINS)}; run it without --stack, or give the agent "
            "one of those"
        )
    cls = _class_of(plugin)
    own = sorted(
        name
        for klass in type(obj).__mro__
        if klass is not cls and cls is not None and issubclass(klass, cls)
        for name in vars(klass)
        if name in plugin.transport
    )
    if own:
        return (
            f"{what} cannot be redirected: its class overrides {', '.join(own)} of "
            f"{plugin.name}, a transport of its own the emulator does not speak"
        )
    if getattr(spec, role) != plugin.stack_part:
        return (
            f"{what} cannot be redirected: stack {stack!r} has no {plugin.name} emulator; choose "
            f"a stack whose {role} is {plugin.stack_part}"
        )
    return _plugin_refusal(plugin, obj, what)


def _plugin_refusal(plugin: _Plugin, obj: Any, what: str) -> str | None:
    if plugin.name == "openai.STT" and obj.capabilities.streaming:
        return (
            f"{what} cannot be redirected: it transcribes over OpenAI's realtime websocket, and "
            "the emulator speaks /audio/transcriptions only (use_realtime=False)"
        )
    if plugin.name == "cartesia.TTS" and (obj.sample_rate % 100 or obj.sample_rate < 8_000):
        return (
            f"{what} cannot be redirected: it asks for {obj.sample_rate} Hz and the emulator's "
            "marked audio needs whole 10 ms frames (a multiple of 100 Hz, from 8000 Hz)"
        )
    moved = f"{what} cannot be redirected: livekit-plugins-{plugin.module} moved its endpoint"
    if plugin.module == "openai":
        client = plugin_client(obj)
        if client is None:
            return moved
        if "azure" in type(client).__name__.lower():
            return f"{what} cannot be redirected: an Azure OpenAI client has no emulator"
    if plugin.name == "google.LLM":
        options = plugin_options(obj, "http_options", "vertexai")
        if options is None:
            return moved
        if options.vertexai:
            return f"{what} cannot be redirected: Vertex AI has no emulator (vertexai=False)"
    if plugin.name == "cartesia.TTS" and plugin_options(obj, "base_url") is None:
        return moved
    return None


def _realtime_model(part: str) -> tuple[str, tuple[type, ...]]:
    """The realtime model a realtime stack's part (``gemini-live``, ``openai-realtime``) plays."""
    if part == "openai-realtime":
        try:
            from livekit.plugins import openai
        except ImportError:
            return "openai.realtime.RealtimeModel", ()
        return "openai.realtime.RealtimeModel", (openai.realtime.RealtimeModel,)
    try:
        from livekit.plugins import google
    except ImportError:
        return "google.realtime.RealtimeModel", ()
    return "google.realtime.RealtimeModel", (google.realtime.RealtimeModel,)


def check_redirects(agent: Agent, stack: str, label: str | None = None) -> list[str]:
    """The agent's own plugin instances a stack would redirect, described.

    Args:
        agent: The app's agent, built as the lab builds it.
        stack: A key of :data:`~resilient_agent.testing.stacks.STACKS` (a pipeline stack).
        label: How the message names the agent (its class name by default).

    Raises:
        NotRedirectable: One of them cannot be: the message names it and why.
    """
    from .stacks import check_stack

    spec = check_stack(stack)
    label = label or type(agent).__name__
    described = []
    for role, obj in own_plugins(agent):
        why = _refusal(label, role, obj, spec, stack)
        if why is not None:
            raise NotRedirectable(why)
        described.append(_describe(obj))
    return described


def redirect_app_plugins(agent: Agent, running: RunningStack, stack: str) -> list[str]:
    """Point the agent's own plugin instances at the running stack's emulators.

    Their options (model, voice, language...) and keys stay: the emulators accept any key, and
    nothing leaves loopback.

    Returns:
        What was redirected, described (empty when the agent has no plugin of its own).

    Raises:
        NotRedirectable: See :func:`check_redirects`; nothing is redirected then.
    """
    described = check_redirects(agent, stack)
    for _role, obj in own_plugins(agent):
        plugin = _which(obj)
        assert plugin is not None  # checked above
        _POINT[plugin.name](obj, running)
    return described


def redirect_plugin(
    role: str, obj: Any, running: RunningStack, label: str, speaker_rate: int
) -> str:
    """Point one agent's own plugin instance at the running pipeline stack's emulator.

    For an agent livekit starts later in the call (a handoff, an ``AgentTask``).

    Args:
        role: ``stt``, ``llm`` or ``tts``.
        obj: The instance.
        running: The call's stack.
        label: How the message names the agent.
        speaker_rate: The rate the call's speaker plays (the first agent's TTS's): a TTS at
            another would be resampled by livekit, and its marked audio with it.

    Returns:
        The instance, described.

    Raises:
        NotRedirectable: It cannot be; nothing is changed then.
    """
    from .stacks import check_stack

    why = _refusal(label, role, obj, check_stack(running.name), running.name)
    if why is None and role == "tts" and obj.sample_rate != speaker_rate:
        why = (
            f"{label}'s own tts {_describe(obj)} cannot be redirected: it speaks at "
            f"{obj.sample_rate} Hz and the call's speaker plays {speaker_rate} Hz (the first "
            "agent's), so livekit would resample the emulator's marked audio away; give it "
            f"sample_rate={speaker_rate} for the lab"
        )
    if why is not None:
        raise NotRedirectable(why)
    plugin = _which(obj)
    assert plugin is not None  # checked above
    _POINT[plugin.name](obj, running)
    return _describe(obj)


def redirect_realtime_plugin(
    role: str, obj: Any, redirect: Callable[[Any], bool], label: str
) -> str:
    """Point one agent's own realtime model at a realtime stack's emulator (``redirect``).

    Raises:
        NotRedirectable: It is not the stack's model, or another part (an STT, a TTS).
    """
    if role == "llm" and redirect(obj):
        return _describe(obj)
    raise NotRedirectable(
        f"{label}'s own {role} {_describe(obj)} cannot be redirected: a realtime stack "
        "emulates only its own provider's realtime model (google.realtime.RealtimeModel on "
        "gemini-live, openai.realtime.RealtimeModel on openai-realtime)"
    )


def _is_provider_plugin(obj: object) -> bool:
    """Whether ``obj`` is (or extends) a livekit provider plugin or LiveKit's inference."""
    return any(
        klass.__module__.startswith(("livekit.plugins.", "livekit.agents.inference"))
        for klass in type(obj).__mro__
    )


def _fitting_stack(role: str, obj: object, label: str) -> str | None:
    """The first stack that would redirect ``obj``, None when none would."""
    from .stacks import STACKS, StackUnavailable, check_stack

    for name in STACKS:
        try:
            spec = check_stack(name)
        except StackUnavailable:
            continue
        if _refusal(label, role, obj, spec, name) is None:
            return name
    return None


def refuse_provider_plugin(role: str, obj: Any, label: str) -> None:
    """Refuse an agent's own provider plugin in a call without a stack.

    The call's providers are the lab's scripted ones: a plugin of the agent's own would take
    their place and reach the real provider (no key: errors or hangs). One of the app's own
    making (not a provider plugin) is its own business and runs.

    Raises:
        NotRedirectable: It is a provider plugin: the message names it and the fix.
    """
    if not _is_provider_plugin(obj):
        return
    what = f"{label}'s own {role} {_describe(obj)} would reach the real provider"
    stack = _fitting_stack(role, obj, label)
    if stack is None:
        raise NotRedirectable(
            f"{what}, and no stack emulates it: remove the plugin from {label} (the lab's calls "
            "bring their own providers)"
        )
    raise NotRedirectable(
        f"{what}: run with --stack {stack} (its emulators take the agent's own instances) or "
        f"remove the plugin from {label}"
    )


def refuse_provider_plugins(agent: Agent, label: str | None = None) -> None:
    """Refuse the agent's own provider plugins in calls without a stack, before any call.

    Raises:
        NotRedirectable: See :func:`refuse_provider_plugin`; the first one found.
    """
    label = label or type(agent).__name__
    for role, obj in own_plugins(agent):
        refuse_provider_plugin(role, obj, label)


def _deepgram(obj: Any, running: RunningStack) -> None:
    obj.update_options(endpoint_url=f"{running.heard.url}/v1/listen")


def _openai(obj: Any, running: RunningStack) -> None:
    server = running.openai_server
    assert server is not None  # an openai part on the stack
    client = plugin_client(obj)
    assert client is not None  # checked by check_redirects
    client.base_url = server.base_url


def _google(obj: Any, running: RunningStack) -> None:
    from google.genai import types

    url = running.gemini_url
    assert url is not None  # a google part on the stack
    options = plugin_options(obj, "http_options")
    assert options is not None  # checked by check_redirects
    given = options.http_options
    # the plugin copies these into each request's config, where the base URL is honoured
    options.http_options = (
        given.model_copy(update={"base_url": url})
        if is_given(given)
        else types.HttpOptions(base_url=url)
    )


def _cartesia(obj: Any, running: RunningStack) -> None:
    options = plugin_options(obj, "base_url")
    assert options is not None  # checked by check_redirects
    options.base_url = running.spoken.url


_POINT: Mapping[str, Callable[[Any, RunningStack], None]] = MappingProxyType(
    {
        "deepgram.STT": _deepgram,
        "openai.STT": _openai,
        "openai.LLM": _openai,
        "google.LLM": _google,
        "cartesia.TTS": _cartesia,
    }
)


async def close_app_plugins(agent: Agent) -> None:
    """Close the agent's own STT, LLM and TTS, as a job's shutdown would, after its call.

    The session closes the streams it opened but not the plugins: a pooled socket (Cartesia's)
    stays open, and the emulator serving it could not stop.
    """
    for role in ("stt", "llm", "tts"):
        value = getattr(agent, role)
        if value is not None and is_given(value):
            await value.aclose()


async def close_plugins(plugins: list[Any]) -> None:
    """Close plugin instances the lab redirected during a call (see :func:`close_app_plugins`)."""
    for plugin in plugins:
        await plugin.aclose()


@contextlib.asynccontextmanager
async def app_http_context() -> AsyncIterator[None]:
    """The job's HTTP session of livekit (``utils.http_context``), which a job process sets up.

    An app's Deepgram and Cartesia instances built without ``http_session=`` take theirs from
    it; outside a job, ``http_context.open()`` is livekit's public way to provide it.
    """
    async with http_context.open():
        yield
