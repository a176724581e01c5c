"""Wrapping an agent's function tools so every call runs through the chain.

The wrapper keeps the tool's name, description, JSON schema and ``RunContext`` injection: it is a
new ``FunctionTool`` (or ``RawFunctionTool``) with the same info whose function exposes the
original signature through ``__wrapped__``, which livekit's schema builder and argument
preparation follow. Speeches created while the tool body runs are attributed to the tool through
a ``ContextVar`` (``speech_created`` fires synchronously in the creating task).

Toolsets (``llm.Toolset``, e.g. livekit's ``beta.tools.EndCallTool``) are wrapped too: a
:class:`ChainedToolset` stands in for the app's toolset, keeps its id, setup and close, and offers
its tools wrapped (looked up each time, so tools a toolset adds later are wrapped as well).
``AsyncToolset`` is left as it is: livekit routes its tools to their own executor by its type.

``livekit.agents.mock_tools`` replaces a tool's execution by name before the tool is called, so a
mocked tool bypasses the wrapper and therefore the chain.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any

from livekit.agents import RunContext
from livekit.agents.llm import FunctionTool, RawFunctionTool, Tool, ToolFlag, Toolset

from .._engine.requests import ToolCall
from .._livekit.compat import event_listeners, tool_call_releasable

AnyFunctionTool = FunctionTool[..., Any] | RawFunctionTool[..., Any]

__all__ = [
    "ChainedToolset",
    "ToolRunner",
    "class_tools",
    "current_tool",
    "is_wrapped",
    "outside_tools",
    "release_tool_call",
    "wrap_tool",
    "wrap_toolset",
]

ToolRunner = Callable[[ToolCall, Callable[[ToolCall], Awaitable[Any]]], Awaitable[Any]]
"""Runs a call through the chain; the second argument runs the tool body itself."""

_current_tool: ContextVar[str | None] = ContextVar("resilient_agent_current_tool", default=None)
_WRAPPED_MARK = "__resilient_agent_wrapped__"


def current_tool() -> str | None:
    """The name of the function tool whose body is running in this task, if any."""
    return _current_tool.get()


@contextlib.contextmanager
def outside_tools() -> Iterator[None]:
    """Run the block as if no tool body were running (for work that outlives the tool)."""
    token = _current_tool.set(None)
    try:
        yield
    finally:
        _current_tool.reset(token)


async def release_tool_call(run_context: RunContext[Any], message: str) -> bool:
    """Stop the turn waiting for a running tool call; its body goes on in the background.

    What livekit does itself once an interrupted speech has waited its 5 s for a tool: the call
    is answered with ``message`` through the first ``RunContext.update()``, and the body's return
    value reaches the LLM later as a deferred tool reply.

    Args:
        run_context: The running call's context.
        message: What the LLM reads as the call's result meanwhile.

    Returns:
        False, doing nothing, when the call was already released (the tool called
        ``update()`` itself) or runs without livekit's tool executor.
    """
    if not tool_call_releasable(run_context):
        return False
    await run_context.update(message, template="{message}")
    return True


def is_wrapped(tool: object) -> bool:
    """Whether ``tool`` already runs through a chain."""
    return bool(getattr(tool, _WRAPPED_MARK, False))


def class_tools(cls: type) -> list[tuple[str, AnyFunctionTool]]:
    """The function tools a class defines, with the attribute names they live under."""
    found: list[tuple[str, AnyFunctionTool]] = []
    for attr, member in inspect.getmembers(cls):
        if isinstance(member, (FunctionTool, RawFunctionTool)):
            found.append((attr, member))
    return found


def wrap_tool(tool: AnyFunctionTool, runner: ToolRunner) -> AnyFunctionTool:
    """A tool with the same info and signature whose calls go through ``runner``."""
    if is_wrapped(tool):
        return tool
    signature = inspect.signature(tool)
    name = tool.info.name
    cancellable = ToolFlag.CANCELLABLE in tool.info.flags

    async def call_through_chain(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        context_args = {k: v for k, v in bound.arguments.items() if isinstance(v, RunContext)}
        run_context = next(iter(context_args.values()), None)
        call = ToolCall(
            name=name,
            arguments={k: v for k, v in bound.arguments.items() if k not in context_args},
            call_id=run_context.function_call.call_id if run_context is not None else None,
            run_context=run_context,
            cancellable=cancellable,
        )

        async def run_body(request: ToolCall) -> Any:
            arguments = {**request.arguments, **context_args}
            final = inspect.BoundArguments(signature, arguments)
            result = tool(*final.args, **final.kwargs)
            return await result if inspect.isawaitable(result) else result

        token = _current_tool.set(name)
        try:
            return await runner(call, run_body)
        finally:
            _current_tool.reset(token)

    functools.update_wrapper(call_through_chain, tool)
    wrapped = type(tool)(call_through_chain, tool.info)  # type: ignore[arg-type]
    setattr(wrapped, _WRAPPED_MARK, True)
    return wrapped


class ChainedToolset(Toolset):
    """An app's toolset whose function tools run through the chain.

    Args:
        inner: The app's toolset.
        runner: Runs one call through the chain.
    """

    def __init__(self, inner: Toolset, runner: ToolRunner) -> None:
        super().__init__(id=inner.id)
        self.inner = inner
        self._chain_runner = runner
        self._runner = runner if not _is_end_call_toolset(inner) else self._run_keeping_one_close
        self._wrapped: dict[int, Tool | Toolset] = {}
        self._close_listeners: list[Any] = []
        setattr(self, _WRAPPED_MARK, True)

    async def _run_keeping_one_close(
        self, call: ToolCall, body: Callable[[ToolCall], Awaitable[Any]]
    ) -> Any:
        """Run a call of livekit's ``EndCallTool``, which adds a close listener per call.

        Each listener deletes the room and shuts the job down on ``close``: after a vetoed
        hang-up, a second ``end_call`` would delete the room twice (two requests to livekit's
        server). Only the latest call's listener is kept.
        """
        session = call.run_context.session if call.run_context is not None else None
        before = event_listeners(session, "close") if session is not None else None
        try:
            return await self._chain_runner(call, body)
        finally:
            after = event_listeners(session, "close") if session is not None else None
            if session is not None and before is not None and after is not None:
                added = [listener for listener in after if listener not in before]
                if added:
                    for earlier in self._close_listeners:
                        session.off("close", earlier)
                    self._close_listeners = added

    @property
    def tools(self) -> list[Tool | Toolset]:
        """The inner toolset's tools, each wrapped once."""
        found: list[Tool | Toolset] = []
        for tool in self.inner.tools:
            wrapped = self._wrapped.get(id(tool))
            if wrapped is None:
                wrapped = wrap_toolset(tool, self._runner)
                self._wrapped[id(tool)] = wrapped
            found.append(wrapped)
        return found

    async def setup(self) -> ChainedToolset:
        """Set the inner toolset up."""
        await self.inner.setup()
        return self

    async def aclose(self) -> None:
        """Close the inner toolset."""
        await self.inner.aclose()


def wrap_toolset(tool: Tool | Toolset, runner: ToolRunner) -> Tool | Toolset:
    """``tool`` running through ``runner``: function tools and plain toolsets are wrapped.

    ``AsyncToolset`` and other tools (provider tools) are returned as they are.
    """
    if isinstance(tool, (FunctionTool, RawFunctionTool)):
        return wrap_tool(tool, runner)
    if isinstance(tool, Toolset) and not is_wrapped(tool) and not _is_async_toolset(tool):
        return ChainedToolset(tool, runner)
    return tool


def _is_end_call_toolset(tool: Toolset) -> bool:
    from livekit.agents.beta.tools import EndCallTool

    return isinstance(tool, EndCallTool)


def _is_async_toolset(tool: Toolset) -> bool:
    from livekit.agents.llm.async_toolset import AsyncToolset

    return isinstance(tool, AsyncToolset)
