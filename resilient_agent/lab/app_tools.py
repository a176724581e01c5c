"""An app's own function tools, as the lab calls them (``resilient-agent lab --agent``).

The lab finds every function tool the app's agent offers the LLM (toolsets such as livekit's
``EndCallTool`` included, as livekit flattens them), and scripts the LLM to call each one with
arguments valid for its schema: the smallest value of each required parameter, or the
arguments the app gives in a ``--mock`` file. Tools with side effects are replaced for the call
by the mocks of that file, the way livekit's own ``mock_tools`` does it in its tests; every other
tool runs as it is, speech, sleeps and all.

A mock file is a Python file::

    MOCKS = {"check_order_status": lambda order_id: f"Order {order_id} shipped."}
    ARGUMENTS = {"check_order_status": {"order_id": "A1234"}}   # optional, per tool

A mock receives the tool's arguments by name (``lambda **arguments:`` all of them), and livekit's
``RunContext`` only when it asks for it (``lambda ctx, order_id:``): see
:mod:`resilient_agent.testing.tool_mocks`.
"""

from __future__ import annotations

import runpy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
from livekit.agents import Agent, llm
from livekit.agents.llm.utils import function_arguments_to_pydantic_model

from ..testing.tool_mocks import expected_output, mock_problem

_AnyTool = llm.FunctionTool[..., Any] | llm.RawFunctionTool[..., Any]

__all__ = [
    "AppTool",
    "MockFileError",
    "ToolMocks",
    "app_tools",
    "example_arguments",
    "load_mocks",
    "tool_schema",
]


class MockFileError(ValueError):
    """A ``--mock`` file the lab cannot use; the message names the entry and the fix."""


@dataclass(frozen=True)
class ToolMocks:
    """What a ``--mock`` file says.

    Attributes:
        mocks: Tool name to the callable run instead of the tool (livekit's ``mock_tools``).
        arguments: Tool name to the arguments the scripted LLM calls it with.
    """

    mocks: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    arguments: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class AppTool:
    """One of the app's function tools, as the lab calls it.

    Attributes:
        name: The name the LLM calls it by.
        arguments: The arguments the scripted LLM calls it with.
        mocked: Whether a mock runs instead of the tool.
        mock_output: What the tool's mock answers the LLM for these arguments, called directly
            (None when that cannot be known outside a call: see
            :func:`~resilient_agent.testing.tool_mocks.expected_output`); every call of the tool
            must answer it.
    """

    name: str
    arguments: Mapping[str, Any]
    mocked: bool = False
    mock_output: str | None = None


def tool_schema(tool: _AnyTool) -> dict[str, Any]:
    """The JSON schema of the arguments the LLM gives ``tool``."""
    if isinstance(tool, llm.RawFunctionTool):
        parameters = tool.info.raw_schema.get("parameters", {})
        return dict(parameters) if isinstance(parameters, Mapping) else {}
    return function_arguments_to_pydantic_model(tool).model_json_schema()


def function_tools(agent: Agent) -> dict[str, _AnyTool]:
    """The agent's function tools by name, toolsets flattened as livekit does when it starts."""
    return llm.ToolContext(agent.tools).function_tools


def example_arguments(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The smallest arguments valid for a tool's JSON schema: its required parameters only."""
    value = _example(schema, schema.get("$defs", {}))
    return value if isinstance(value, dict) else {}


def _example(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Any:
    if "$ref" in schema:
        return _example(defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {}), defs)
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for union in ("anyOf", "oneOf", "allOf"):
        options = [o for o in schema.get(union, ()) if o.get("type") != "null"]
        if options:
            return _example(options[0], defs)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        return {
            name: _example(properties.get(name, {}), defs) for name in schema.get("required", ())
        }
    if kind == "array":
        return [_example(schema.get("items", {}), defs)] * int(schema.get("minItems", 0))
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return "example"


def load_mocks(path: Path) -> ToolMocks:
    """Read a ``--mock`` file.

    Raises:
        MockFileError: The file is missing or fails to run, or ``MOCKS`` / ``ARGUMENTS`` are
            not dictionaries of the documented shape.
    """
    if not path.is_file():
        raise MockFileError(f"--mock {str(path)!r}: no such file")
    try:
        namespace = runpy.run_path(str(path))
    except Exception as exc:  # the app's mock file may fail any way when it runs
        raise MockFileError(
            f"--mock {str(path)!r} failed to run: {type(exc).__name__}: {exc}"
        ) from exc
    mocks = namespace.get("MOCKS", {})
    arguments = namespace.get("ARGUMENTS", {})
    if not isinstance(mocks, Mapping) or not all(callable(m) for m in mocks.values()):
        raise MockFileError(
            f"--mock {str(path)!r}: MOCKS must map tool names to callables, each called with "
            "the tool's arguments by name: MOCKS = {'tool_name': lambda **arguments: 'result'}"
        )
    if not isinstance(arguments, Mapping) or not all(
        isinstance(a, Mapping) for a in arguments.values()
    ):
        raise MockFileError(
            f"--mock {str(path)!r}: ARGUMENTS must map tool names to dicts of arguments: "
            "ARGUMENTS = {'tool_name': {'parameter': 'value'}}"
        )
    if not mocks and not arguments:
        raise MockFileError(f"--mock {str(path)!r}: defines neither MOCKS nor ARGUMENTS")
    return ToolMocks(dict(mocks), {name: dict(a) for name, a in arguments.items()})


def app_tools(agent: Agent, mocks: ToolMocks | None = None) -> list[AppTool]:
    """Every function tool of ``agent``, with the arguments the lab calls it with.

    Raises:
        MockFileError: The mock file names a tool the agent does not have, or gives
            arguments its schema rejects (the message names the tool and the field).
    """
    given = mocks or ToolMocks()
    tools = function_tools(agent)
    unknown = sorted((set(given.mocks) | set(given.arguments)) - set(tools))
    if unknown:
        raise MockFileError(
            f"--mock names {', '.join(map(repr, unknown))}, which {type(agent).__name__} does not "
            f"have (its tools: {', '.join(sorted(tools)) or 'none'})"
        )
    found = []
    for name, tool in tools.items():
        if name in given.arguments:
            arguments = dict(given.arguments[name])
            _check_arguments(name, tool, arguments)
        else:
            arguments = example_arguments(tool_schema(tool))
        mock = given.mocks.get(name)
        if mock is None:
            found.append(AppTool(name, arguments))
            continue
        problem = mock_problem(mock, _argument_names(tool))
        if problem is not None:
            raise MockFileError(f"--mock MOCKS[{name!r}]: {problem}")
        found.append(AppTool(name, arguments, True, expected_output(tool, mock, arguments)))
    return found


def _argument_names(tool: _AnyTool) -> frozenset[str]:
    """The names of the arguments the LLM gives ``tool`` (a raw tool's, from its schema)."""
    return frozenset(tool_schema(tool).get("properties", {}))


def _check_arguments(name: str, tool: _AnyTool, arguments: dict[str, Any]) -> None:
    if isinstance(tool, llm.RawFunctionTool):
        return  # a raw tool validates its own arguments
    try:
        function_arguments_to_pydantic_model(tool).model_validate(arguments)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc'])) or 'arguments'}: {error['msg']}"
            for error in exc.errors()
        )
        raise MockFileError(
            f"--mock ARGUMENTS[{name!r}] does not fit the tool: {problems}"
        ) from exc
