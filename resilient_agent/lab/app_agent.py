"""Running the catalog on an app's own agent class (``resilient-agent lab --agent myapp:MyAgent``).

Every scenario brings its own app code (a booking tool with a hold message, an end-call tool, a
greeting...) written as a subclass of the base class under test, built with
``base(instructions=...)``. An app's class often has a constructor of its own that takes no
``instructions`` (it sets its instructions, tools and middleware itself): the catalog then runs
on an adapter subclass whose constructor calls the app's, so the app's own tools, hooks and
middleware stay and the scenario's app code is added on top. A scenario whose app code still
cannot be built on the class is skipped with a line saying why.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from livekit.agents import Agent, llm

from ..testing.scenario import Scenario

__all__ = ["AppClassError", "CatalogBase", "catalog_base", "scenario_mismatch"]


class AppClassError(ValueError):
    """The lab cannot build an agent of this class at all (its constructor needs arguments)."""


@dataclass(frozen=True)
class CatalogBase:
    """The class the catalog's app code subclasses for one agent under test.

    Attributes:
        cls: The app's class itself, or an adapter subclass of it.
        note: One line saying how the catalog runs on the app's class; None when the class
            takes ``instructions=`` like ``Agent`` and is used as it is.
    """

    cls: type[Agent]
    note: str | None = None


_PLAIN = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def catalog_base(cls: type[Agent]) -> CatalogBase:
    """How the catalog builds its scenarios' agents on ``cls``.

    Raises:
        AppClassError: The constructor has parameters without defaults (other than
            ``instructions``): the lab cannot know what to pass.
    """
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    required = [
        p.name
        for p in params
        if p.kind in _PLAIN and p.default is inspect.Parameter.empty and p.name != "instructions"
    ]
    if required:
        raise AppClassError(
            f"{cls.__name__}() needs {', '.join(required)}: the lab builds the agent itself for "
            "every scenario, so give every constructor parameter a default"
        )
    missing = [
        name
        for name in ("instructions", "tools")
        if not any(
            p.kind is inspect.Parameter.VAR_KEYWORD or (p.name == name and p.kind in _PLAIN)
            for p in params
        )
    ]
    if not missing:
        return CatalogBase(cls)
    return CatalogBase(
        _adapter(cls, needs_instructions="instructions" not in missing),
        note=(
            f"{cls.__name__}() takes no {' and no '.join(missing)}: each scenario's app code "
            f"(its tools, greeting, hooks) runs as a subclass of {cls.__name__}, built with "
            f"{cls.__name__}()'s own instructions, tools and middleware"
        ),
    )


def _adapter(cls: type[Agent], *, needs_instructions: bool) -> type[Agent]:
    # checked by catalog_base: every parameter but instructions has a default
    app_init: Any = cls.__init__
    instructions_required = needs_instructions and (
        inspect.signature(cls.__init__).parameters["instructions"].default
        is inspect.Parameter.empty
    )

    def __init__(
        self: Agent,
        *args: Any,
        instructions: str | None = None,
        tools: list[llm.Tool | llm.Toolset] | None = None,
        **kwargs: Any,
    ) -> None:
        # the catalog passes its instructions, which the scripted LLM never reads, and its
        # tools; anything else would be app code the adapter cannot honour
        if args or kwargs:
            raise TypeError(
                f"the catalog passed {sorted(kwargs) or 'positional arguments'} that "
                f"{cls.__name__}() cannot take"
            )
        if instructions_required:
            app_init(self, instructions=instructions or "")
        else:
            app_init(self)
        _replace_clashing_tools(self, cls, list(tools or ()))

    return type(cls.__name__, (cls,), {"__init__": __init__, "__module__": cls.__module__})


def _method_tools(classes: Iterable[type]) -> set[str]:
    return {
        name
        for klass in classes
        for name, value in vars(klass).items()
        if isinstance(value, (llm.FunctionTool, llm.RawFunctionTool))
    }


def _names(tool: llm.Tool | llm.Toolset) -> set[str]:
    return set(llm.ToolContext([tool]).function_tools)


def _replace_clashing_tools(
    agent: Agent, app: type[Agent], given: list[llm.Tool | llm.Toolset]
) -> None:
    """The scenario's tools (passed, or methods of its subclass) replace the app's of that name.

    A toolset of the app's (livekit's ``EndCallTool``) goes as a whole when one of its tools is
    replaced: the scenario's own end-call tool then ends its call, and the app's own end-call
    tool is raced by the app-tool scenarios (``app_tool/<name>/...``) instead.
    """
    mro = type(agent).__mro__
    methods = _method_tools(mro)
    given_names = set(llm.ToolContext(given).function_tools)
    replaced = _method_tools(k for k in mro if k is not app and issubclass(k, app)) | given_names
    if not replaced:
        return
    kept = []
    for tool in agent.tools:
        names = _names(tool)
        # a method tool is already the scenario's where the scenario overrides it
        is_method = isinstance(tool, (llm.FunctionTool, llm.RawFunctionTool)) and names <= methods
        if (is_method and not names & given_names) or not names & replaced:
            kept.append(tool)
    _update_tools_before_start(agent, [*kept, *given])


def _update_tools_before_start(agent: Agent, tools: list[llm.Tool | llm.Toolset]) -> None:
    # Agent.update_tools only assigns while the agent has no activity (livekit 1.8): the
    # coroutine finishes at its first step, so a constructor can drive it
    step = agent.update_tools(tools)
    try:
        step.send(None)
    except StopIteration:
        return
    step.close()
    raise RuntimeError(f"{type(agent).__name__}.update_tools awaited before the agent started")


def scenario_mismatch(scenario: Scenario, base: type[Agent]) -> str | None:
    """Why the scenario's app code cannot be built on ``base``, None if it can.

    The agent is built once here, outside any session, so that a class which cannot take the
    scenario's app code costs that scenario only (skipped with this line) and never a traceback.
    """
    try:
        agent = scenario.agent(base)
    except Exception as exc:  # the app's own constructor may fail any way
        return (
            f"the scenario's app code cannot be built on {base.__name__}: "
            f"{type(exc).__name__}: {exc}"
        )
    try:
        # what livekit does with the tools when the agent starts
        llm.ToolContext(agent.tools)
    except ValueError as exc:
        return (
            f"the scenario's own app code clashes with {base.__name__}'s tools ({exc}): it "
            "needs its own tool of that name (rename yours to run it)"
        )
    return None
