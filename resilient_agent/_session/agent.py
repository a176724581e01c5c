"""``ResilientAgent``: a drop-in ``livekit.agents.Agent`` that runs a middleware chain."""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import AsyncIterable, Sequence
from typing import Any

from livekit import rtc
from livekit.agents import Agent, utils
from livekit.agents.llm import (
    ChatContext,
    ChatMessage,
    Tool,
    Toolset,
)

from .._engine.events import MiddlewareErrorEvent, ResilientEventTypes
from .._engine.hooks import Middleware
from .._engine.live import MiddlewareView, SessionInstances
from .._engine.log import get_logger
from .._engine.options import OptionChecker
from .._engine.plugins import load_plugins
from .._engine.requests import ToolCall
from .._engine.spec import MiddlewareSpec, middleware_entries
from .._engine.tool_names import known_tool_names, unknown_tools
from .._livekit import end_call
from .._livekit.versions import warn_if_untested_livekit
from .chain_run import ChainRun
from .cut_in import run_as_cut_in
from .report import CallReport
from .runtime import CORE, SessionRuntime
from .speaking import LineCannotBeSpoken, speak_line, speaking_way
from .tool_calls import worded_tool_errors
from .tools import class_tools, wrap_tool, wrap_toolset

__all__ = ["ResilientAgent", "default_middleware"]

MiddlewareEntry = Middleware | MiddlewareSpec

logger = get_logger("agent")


def _checked_tool_error_message(message: object) -> str | None:
    if message is None:
        return None
    return OptionChecker("ResilientAgent").format_string(
        "tool_error_message",
        message,
        {"tool": "book_table"},
        example="The {tool} tool did not work.",
    )


def default_middleware() -> list[MiddlewareEntry]:
    """The first-party middleware ``ResilientAgent`` runs when ``middleware=`` is not given."""
    # imported by name: the first-party package lives in the top-level middleware/ folder,
    # reached as resilient_agent.middleware through a symbolic link (see pyproject.toml)
    first_party = importlib.import_module("resilient_agent.middleware")
    entries: list[MiddlewareEntry] = list(first_party.default_middleware())
    return entries


def _default_specs() -> list[MiddlewareEntry]:
    """The first-party middleware as specs, so each session gets its own instances."""
    return list(_first_party_specs())


@functools.cache
def _first_party_specs() -> tuple[MiddlewareEntry, ...]:
    # once per process: a spec is a class and its options, which no agent changes, and building
    # one inspects the class's signature
    first_party = importlib.import_module("resilient_agent.middleware")
    return tuple(first_party.default_middleware_specs())


class ResilientAgent(Agent):
    """An ``Agent`` whose tool calls, speeches and session events run through middleware.

    Any ``Agent(...)`` call works unchanged as ``ResilientAgent(...)``.

    Args:
        *args: Passed to ``Agent``.
        middleware: Middleware instances or ``MiddlewareSpec`` s, in order; None runs the
            first-party set (:func:`default_middleware`).
        plugins: Names of middleware plugins (entry point group ``resilient_agent.middleware``)
            to append, in order.
        tool_error_message: None (the default) leaves an unexpected tool exception to livekit,
            as with ``Agent``: livekit logs it at ERROR and tells the LLM only that an internal
            error occurred. A sentence (``{tool}`` is the tool's name) is given to the LLM
            instead; the exception is still logged at ERROR (``tool_failed``).
        **kwargs: Passed to ``Agent``.

    Raises:
        MiddlewareError: A middleware, hook, option or plugin is invalid; raised here, never
            during a call.

    Attributes:
        events: Emits ``middleware_error``, ``race_detected`` and ``race_handled``: the
            session's while this agent's chain runs, and the whole call's (agents handed to
            included) on the agent the session started with.
    """

    tool_close_bound_s: float = 10.0
    """How long a tool body may still run once the agent exits a closing session, before it is
    cancelled and reported (``middleware_error``, ``hook="tool:<name>"``); 1 s when livekit
    already interrupted the tool's speech and gave up waiting for it. A plain ``Agent`` waits
    forever for a tool that never returns, so ``session.aclose()`` never completes.
    """

    def __init__(
        self,
        *args: Any,
        middleware: Sequence[MiddlewareEntry] | None = None,
        plugins: Sequence[str] | None = (),
        tool_error_message: str | None = None,
        **kwargs: Any,
    ) -> None:
        warn_if_untested_livekit()
        self._tool_error_message = _checked_tool_error_message(tool_error_message)
        entries = _default_specs() if middleware is None else middleware_entries(middleware)
        if plugins is None:
            plugins = ()
        if not isinstance(plugins, str):
            # a string gets the plugin loader's own fix (plugins=['name'])
            OptionChecker("ResilientAgent").sequence("plugins", plugins, fix="pass a list of names")
        entries.extend(load_plugins(plugins))
        self._instances = SessionInstances(entries)
        self._runtime: SessionRuntime | None = None
        self._chain_run: ChainRun | None = None
        self.events: utils.EventEmitter[ResilientEventTypes] = utils.EventEmitter()
        # instance attributes shadow the class tools, so livekit's discovery finds the wrappers
        for attr, tool in class_tools(type(self)):
            setattr(self, attr, wrap_tool(tool.__get__(self, type(self)), self._run_tool))
        tools: list[Tool | Toolset] = list(kwargs.pop("tools", None) or [])
        kwargs["tools"] = [self._wrap(t) for t in tools]
        super().__init__(*args, **kwargs)
        # livekit calls these by attribute on the agent; the instance attributes run the chain
        # around the app's own hooks, whether or not the app overrides them
        self._app_on_enter = self.on_enter
        self._app_on_exit = self.on_exit
        self._app_on_user_turn_completed = self.on_user_turn_completed
        self._app_llm_node = self.llm_node
        self._app_tts_node = self.tts_node
        self._app_realtime_audio_node = self.realtime_audio_output_node
        cut_in_hook = run_as_cut_in(self.on_user_turn_exceeded)
        self.on_user_turn_exceeded = cut_in_hook  # type: ignore[method-assign,assignment]
        self.llm_node = self._llm_node  # type: ignore[method-assign]
        self.tts_node = self._tts_node  # type: ignore[method-assign]
        self.realtime_audio_output_node = self._realtime_audio_node  # type: ignore[method-assign]
        self.on_enter = self._enter  # type: ignore[method-assign]
        self.on_exit = self._exit  # type: ignore[method-assign]
        self.on_user_turn_completed = self._user_turn_completed  # type: ignore[method-assign]

    @property
    def middleware(self) -> MiddlewareView:
        """The live instances in dispatch order: ``agent.middleware["Name"]``, or by index.

        During a session, the instances running in it; after one, the last session's; before
        the first, the instances it will run (see :mod:`resilient_agent._engine.live`).
        """
        if self._chain_run is not None:
            return MiddlewareView(self._chain_run.middleware)
        return MiddlewareView(self._instances.prototype.middleware)

    @property
    def middleware_instances(self) -> SessionInstances:
        """The agent's middleware recipes (the session's runtime builds each chain from them)."""
        return self._instances

    async def update_tools(self, tools: list[Tool | Toolset]) -> None:
        """Like ``Agent.update_tools``; new function tools run through the chain too."""
        await super().update_tools([self._wrap(t) for t in tools])

    def _wrap(self, tool: Tool | Toolset) -> Tool | Toolset:
        return wrap_toolset(tool, self._run_tool)

    def attach_runtime(self, runtime: SessionRuntime) -> None:
        """Called by the session's runtime as livekit hands the session to this agent."""
        self._runtime = runtime

    @property
    def call_report(self) -> CallReport | None:
        """What the chain saw and did in the current (or last) session, None before one."""
        return self._runtime.report() if self._runtime is not None else None

    async def _enter(self) -> None:
        """Join the session's runtime, then run the app's ``on_enter``; a fault costs itself."""
        try:
            await self._join_session()
        except Exception as exc:
            # the agent runs as a plain Agent this session; said once, by name
            self._runtime_failed(exc)
        runtime = self._runtime
        with runtime.entering() if runtime is not None else contextlib.nullcontext():
            await self._app_on_enter()

    async def _join_session(self) -> None:
        runtime = self._runtime
        if runtime is None or runtime.session is not self.session or runtime.stop_started:
            # the first ResilientAgent of this session (or of a new one) starts the runtime
            runtime = SessionRuntime(self.session, self)
            self._runtime = runtime
            runtime.start()
        self._chain_run = await runtime.activate(self)
        try:
            known = known_tool_names([*self.session.tools, *self.tools])
            for event in unknown_tools(self._chain_run.middleware, known, runtime.report_error):
                runtime.emit(event)
        except Exception as exc:
            runtime.report_error(CORE, "unknown_tools", exc, "skipped_tool_name_check")
        if speaking_way(self.session, self) is None:
            # said as the agent enters, not when its farewell is due: nothing can voice a line
            what = "a farewell or fallback line of resilient-agent"
            runtime.report_error(CORE, "speaking", LineCannotBeSpoken(what), "lines_unspoken")

    def _runtime_failed(self, exc: Exception) -> None:
        runtime, self._runtime = self._runtime, None
        if runtime is not None:
            runtime.report_error(CORE, "enter", exc, "ran_without_middleware")
            return
        event = MiddlewareErrorEvent(
            middleware=CORE, hook="enter", error=repr(exc), action="ran_without_middleware"
        )
        logger.error(event.type, exc_info=exc, **event.model_dump(exclude={"type", "created_at"}))
        self.events.emit(event.type, event)

    async def _exit(self) -> None:
        runtime = self._runtime
        if runtime is not None:
            # before the app's on_exit: typed input during it is kept through the handoff
            runtime.agent_exiting(self)
        await self._app_on_exit()

    async def _user_turn_completed(self, turn_ctx: ChatContext, new_message: ChatMessage) -> None:
        runtime = self._runtime
        if runtime is None:
            await self._app_on_user_turn_completed(turn_ctx, new_message)
            return
        await runtime.user_turn(self._app_on_user_turn_completed, turn_ctx, new_message)

    def _llm_node(self, chat_ctx: ChatContext, tools: list[Any], model_settings: Any) -> Any:
        runtime = self._runtime
        if runtime is None:
            return self._app_llm_node(chat_ctx, tools, model_settings)
        return runtime.inference(self._app_llm_node, chat_ctx, tools, model_settings)

    def _tts_node(self, text: AsyncIterable[str], model_settings: Any) -> Any:
        runtime = self._runtime
        audio = runtime.reply_audio() if runtime is not None else None
        if audio is None:
            return self._app_tts_node(text, model_settings)
        speech = self.session.current_speech
        return audio.observe(
            speech.id if speech is not None else None, self._app_tts_node, text, model_settings
        )

    def _realtime_audio_node(
        self, audio: AsyncIterable[rtc.AudioFrame], model_settings: Any
    ) -> Any:
        runtime = self._runtime
        observed = runtime.model_audio() if runtime is not None else None
        if observed is None:
            return self._app_realtime_audio_node(audio, model_settings)
        speech = self.session.current_speech
        return observed.observe(
            speech.id if speech is not None else None,
            self._app_realtime_audio_node,
            audio,
            model_settings,
        )

    def hang_up_after_farewell(
        self,
        farewell: str | None = None,
        *,
        delete_room: bool = True,
        allow_interruptions: bool = True,
    ) -> bool:
        """Say ``farewell`` and hang up once it played to the end; returns at once.

        The hang-up goes through ``decide_shutdown``: with the first-party middleware, a caller
        who interrupts the farewell or speaks after it began keeps the call. Hanging up closes
        the session, deletes the room and shuts the job down once the session closed, as
        livekit's ``EndCallTool`` does. A second call while one is pending is ignored.

        Args:
            farewell: What to say; None hangs up without a farewell.
            delete_room: Delete the room (drops every participant, SIP callers included);
                False keeps it.
            allow_interruptions: Whether the caller may interrupt the farewell.

        Returns:
            False if a hang-up was already pending.

        The farewell is said as livekit's ``say()`` would say it, or, on a realtime model that
        has no ``say()`` and no TTS beside it, by the model told to say it word for word
        (:mod:`resilient_agent._session.speaking`).

        Raises:
            OptionError: An argument has the wrong type, or ``farewell`` is blank.
            RuntimeError: The agent is not in a session.
            LineCannotBeSpoken: Nothing in the session can speak the farewell (no TTS, and a
                model that makes no audio).
        """
        check = OptionChecker("hang_up_after_farewell")
        if farewell is not None:
            farewell = check.text("farewell", farewell)
        delete_room = check.flag("delete_room", delete_room)
        allow_interruptions = check.flag("allow_interruptions", allow_interruptions)
        runtime = self._runtime
        if runtime is None or runtime.stop_started:
            raise RuntimeError(
                "hang_up_after_farewell() needs the agent to be running in a session"
            )
        speech = None
        if farewell is not None:
            handle = speak_line(
                self.session,
                farewell,
                allow_interruptions=allow_interruptions,
                what="hang_up_after_farewell()'s farewell",
            )
            speech = runtime.state.speeches.get(handle.id)
        gate = runtime.run.shutdown_gate if runtime.run is not None else None
        return end_call.hang_up_after_farewell(self.session, gate, speech, delete_room=delete_room)

    @property
    def tool_error_message(self) -> str | None:
        """What the LLM is told of an unexpected tool exception (None: livekit's wording)."""
        return self._tool_error_message

    async def _run_tool(self, call: ToolCall, run_body: Any) -> Any:
        if self._runtime is not None:
            return await self._runtime.run_tool(call, run_body)
        return await worded_tool_errors(call, lambda: run_body(call), self._tool_error_message)
