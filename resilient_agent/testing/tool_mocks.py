"""Tool mocks that receive what the documentation says: the tool's arguments, by name.

livekit's ``mock_tools`` calls a mock with the tool's own positional arguments, trimmed to the
mock's parameters: ``lambda order_id: ...`` on ``async def tool(self, ctx, order_id)`` gets the
``RunContext`` as ``order_id``, and ``lambda **arguments: ...`` gets nothing. The lab and
:class:`~resilient_agent.testing.Scenario` hand livekit an adapter instead, which calls the mock
by name:

- each named parameter of the mock receives the tool's argument of that name (the value the
  tool itself would receive: validated, defaults filled in);
- ``**kwargs`` receives every argument not named;
- the ``RunContext`` only when the mock asks for it: a parameter annotated ``RunContext``, or a
  first parameter named ``ctx``, ``context`` or ``run_ctx`` (when the tool has no argument of
  that name).

So ``lambda order_id: ...``, ``lambda **arguments: ...`` and ``lambda ctx, order_id: ...`` all
work, sync or async.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from livekit.agents import Agent, RunContext, llm
from livekit.agents.llm.utils import make_function_call_output, validated_arguments

__all__ = [
    "CONTEXT_NAMES",
    "by_name",
    "expected_output",
    "mock_call_arguments",
    "mock_problem",
    "mock_wants_context",
]

CONTEXT_NAMES = frozenset({"ctx", "context", "run_ctx"})

_AnyTool = llm.FunctionTool[..., Any] | llm.RawFunctionTool[..., Any]


def _context_parameter(mock: Callable[..., Any], tool_arguments: frozenset[str]) -> str | None:
    """The mock's parameter that asks for the ``RunContext``, if any."""
    try:
        parameters = list(inspect.signature(mock).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature asks for nothing
        return None
    for parameter in parameters:
        annotation = parameter.annotation
        if annotation is RunContext or (
            isinstance(annotation, str) and annotation.split("[", 1)[0].endswith("RunContext")
        ):
            return parameter.name
    named = [p for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if named and named[0].name in CONTEXT_NAMES and named[0].name not in tool_arguments:
        return named[0].name
    return None


def mock_wants_context(mock: Callable[..., Any], tool_arguments: frozenset[str]) -> bool:
    """Whether ``mock`` asks for livekit's ``RunContext`` (see the module's rule)."""
    return _context_parameter(mock, tool_arguments) is not None


def mock_problem(mock: Callable[..., Any], tool_arguments: frozenset[str]) -> str | None:
    """Why ``mock`` cannot be called with a tool's arguments, or None when it can.

    Args:
        mock: The mock.
        tool_arguments: The names of the tool's arguments (the ``RunContext`` left out).
    """
    try:
        parameters = inspect.signature(mock).parameters.values()
    except (TypeError, ValueError):
        return None
    context = _context_parameter(mock, tool_arguments)
    missing = [
        p.name
        for p in parameters
        if p.name != context
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.default is inspect.Parameter.empty
        and p.name not in tool_arguments
    ]
    if not missing:
        return None
    takes = ", ".join(sorted(tool_arguments)) or "no arguments"
    return (
        f"the mock asks for {', '.join(map(repr, missing))}, which the tool does not take "
        f"(it takes {takes}); name the mock's parameters after the tool's arguments, or take "
        "**arguments"
    )


def mock_call_arguments(
    mock: Callable[..., Any], arguments: Mapping[str, Any], context: Any = None
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The positional and keyword arguments to call ``mock`` with, by the module's rule.

    Args:
        mock: The mock.
        arguments: The tool's arguments by name.
        context: The call's ``RunContext``, given to a mock that asks for it.
    """
    try:
        parameters = list(inspect.signature(mock).parameters.values())
    except (TypeError, ValueError):
        return (), dict(arguments)
    wanted = _context_parameter(mock, frozenset(arguments))
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    named = {p.name for p in parameters}
    for parameter in parameters:
        if parameter.kind is parameter.VAR_POSITIONAL:
            continue
        if parameter.kind is parameter.VAR_KEYWORD:
            kwargs.update({k: v for k, v in arguments.items() if k not in named})
            continue
        if parameter.name == wanted:
            value = context
        elif parameter.name in arguments:
            value = arguments[parameter.name]
        else:
            continue  # its default applies (mock_problem names one without a default)
        if parameter.kind is parameter.POSITIONAL_ONLY:
            args.append(value)
        else:
            kwargs[parameter.name] = value
    return tuple(args), kwargs


def _tool_arguments(tool: _AnyTool, bound: Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(tool, llm.RawFunctionTool):
        raw = bound.get("raw_arguments", {})
        return dict(raw) if isinstance(raw, Mapping) else {}
    return {k: v for k, v in bound.items() if not isinstance(v, RunContext)}


def _adapter(tool: _AnyTool, mock: Callable[..., Any]) -> Callable[..., Any]:
    """An async callable with the tool's own signature that calls ``mock`` by name."""
    signature = inspect.signature(tool)

    async def call_by_name(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs)
        bound.apply_defaults()
        context = next((v for v in bound.arguments.values() if isinstance(v, RunContext)), None)
        arguments = _tool_arguments(tool, bound.arguments)
        call_args, call_kwargs = mock_call_arguments(mock, arguments, context)
        result = mock(*call_args, **call_kwargs)
        return await result if inspect.isawaitable(result) else result

    functools.update_wrapper(call_by_name, mock, assigned=("__name__", "__qualname__", "__doc__"))
    # livekit's mock_tools binds the tool's own arguments to the mock's signature
    call_by_name.__signature__ = signature  # type: ignore[attr-defined]
    return call_by_name


def by_name(agent: Agent, mocks: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """``mocks`` as livekit's ``mock_tools`` takes them, each called by the module's rule.

    A mock for a name ``agent`` has no tool of is passed on as it is.
    """
    tools = llm.ToolContext(agent.tools).function_tools
    return {
        name: _adapter(tools[name], mock) if name in tools else mock for name, mock in mocks.items()
    }


def expected_output(
    tool: _AnyTool, mock: Callable[..., Any], arguments: Mapping[str, Any]
) -> str | None:
    """What the LLM gets back when ``mock`` answers a call of ``tool`` with ``arguments``.

    The mock is called here, directly, with the tool's arguments as livekit would validate them
    (defaults filled in), and its return value rendered as livekit renders a tool's output.
    None when that cannot be known outside a call: the mock asks for the ``RunContext``, raises,
    or is a coroutine while an event loop runs.
    """
    try:
        values = validated_arguments(tool, dict(arguments))
    except Exception:  # arguments the tool rejects: the call itself reports them
        return None
    if isinstance(tool, llm.RawFunctionTool):
        values = dict(values)
    if mock_wants_context(mock, frozenset(values)):
        return None
    call_args, call_kwargs = mock_call_arguments(mock, values)
    try:
        result = mock(*call_args, **call_kwargs)
        if inspect.isawaitable(result):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                result = asyncio.run(_awaited(result))
            else:
                _close(result)
                return None
    except Exception:  # a mock that raises answers an error: nothing to expect
        return None
    call = llm.FunctionCall(call_id="expected", name=tool.info.name, arguments="{}")
    rendered = make_function_call_output(fnc_call=call, output=result, exception=None)
    return None if rendered.fnc_call_out is None else rendered.fnc_call_out.output


async def _awaited(result: Any) -> Any:
    return await result


def _close(result: Any) -> None:
    close = getattr(result, "close", None)
    if callable(close):
        close()
