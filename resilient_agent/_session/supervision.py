"""Supervising agents the app did not rebase on ``ResilientAgent``.

Calls pass through code nobody can rebase: livekit's workflow tasks (``GetEmailTask``,
``TaskGroup``, ...), ``AgentTask`` s written on plain ``Agent``, third-party agents returned from a
handoff tool. When the session's runtime sees one become active, it shadows five of the agent's
hooks on the instance (livekit calls each by attribute) so that its turns, inferences and own
function tools go through the chain that handed control to it, its entry and exit tell the
runtime where a handoff stands, and the cut-ins of its ``on_user_turn_exceeded`` are known as
such (:mod:`resilient_agent._session.cut_in`). The shadows are put back when the session ends.

:func:`unsupervised` opts an agent out: its hooks and tools are left as they are.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from livekit.agents import Agent
from livekit.agents.llm import ChatContext, ChatMessage, FunctionTool, RawFunctionTool

from .._engine.requests import ToolCall
from .._livekit.interception import Interceptor
from .cut_in import run_as_cut_in
from .tools import AnyFunctionTool, wrap_tool

__all__ = ["AgentSupervision", "Supervisor", "is_unsupervised", "unsupervised"]

_OPTED_OUT = "__resilient_agent_unsupervised__"

_AgentT = TypeVar("_AgentT", bound=Agent)

LlmNode = Callable[[ChatContext, list[Any], Any], Any]
UserTurnHook = Callable[[ChatContext, ChatMessage], Awaitable[None]]


def unsupervised(agent: _AgentT) -> _AgentT:
    """Leave ``agent`` out of the session's supervision: it runs exactly as on livekit.

    Its tools, turns and inferences then skip the chain; the session's other agents stay
    protected, and the chain goes on following the session's events.

    Returns:
        ``agent`` itself.
    """
    setattr(agent, _OPTED_OUT, True)
    return agent


def is_unsupervised(agent: object) -> bool:
    """Whether :func:`unsupervised` opted ``agent`` out."""
    return bool(getattr(agent, _OPTED_OUT, False))


class Supervisor(Protocol):
    """What the shadows ask: the session's runtime."""

    def agent_entering(self, agent: Agent) -> None:
        """``agent``'s activity started; its ``on_enter`` runs next."""

    def entering(self) -> AbstractContextManager[None]:
        """An agent's ``on_enter`` runs inside this block."""

    def agent_exiting(self, agent: Agent) -> None:
        """``agent``'s activity drains: a handoff begins, or the session closes."""

    async def user_turn(
        self, app_hook: UserTurnHook, turn_ctx: ChatContext, new_message: ChatMessage
    ) -> None:
        """Run the agent's ``on_user_turn_completed`` inside ``wrap_user_turn``."""

    def inference(
        self, app_node: LlmNode, chat_ctx: ChatContext, tools: list[Any], model_settings: Any
    ) -> Any:
        """Run the agent's ``llm_node`` inside ``wrap_llm_request``."""

    async def run_tool(self, call: ToolCall, run_body: Callable[[ToolCall], Awaitable[Any]]) -> Any:
        """Run one tool call through the active chain."""


class AgentSupervision:
    """The shadows on the plain agents of one session."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor
        self._interceptor = Interceptor()
        self._supervised: set[int] = set()

    def supervise(self, agent: Agent) -> bool:
        """Shadow ``agent``'s hooks (once per session); False when it opted out."""
        if is_unsupervised(agent):
            return False
        if id(agent) in self._supervised:
            return True
        self._supervised.add(id(agent))
        supervisor = self._supervisor
        wrapped: dict[int, tuple[AnyFunctionTool, AnyFunctionTool]] = {}

        def shadow_enter(original: Callable[[], Awaitable[None]]) -> Callable[[], Any]:
            async def on_enter() -> None:
                supervisor.agent_entering(agent)
                with supervisor.entering():
                    await original()

            return on_enter

        def shadow_exit(original: Callable[[], Awaitable[None]]) -> Callable[[], Any]:
            async def on_exit() -> None:
                supervisor.agent_exiting(agent)
                await original()

            return on_exit

        def shadow_turn(original: UserTurnHook) -> UserTurnHook:
            async def on_user_turn_completed(
                turn_ctx: ChatContext, new_message: ChatMessage
            ) -> None:
                await supervisor.user_turn(original, turn_ctx, new_message)

            return on_user_turn_completed

        def shadow_node(original: LlmNode) -> LlmNode:
            def llm_node(chat_ctx: ChatContext, tools: list[Any], model_settings: Any) -> Any:
                _wrap_own_tools(agent, tools, wrapped, supervisor.run_tool)
                return supervisor.inference(original, chat_ctx, tools, model_settings)

            return llm_node

        self._interceptor.install("Agent.on_enter", agent, shadow_enter)
        self._interceptor.install("Agent.on_exit", agent, shadow_exit)
        self._interceptor.install("Agent.on_user_turn_completed", agent, shadow_turn)
        self._interceptor.install("Agent.llm_node", agent, shadow_node)
        self._interceptor.install("Agent.on_user_turn_exceeded", agent, run_as_cut_in)
        return True

    def release(self) -> None:
        """Put every shadowed hook back (the session is over)."""
        self._interceptor.restore_all()
        self._supervised.clear()


def _wrap_own_tools(
    agent: Agent,
    tools: list[Any],
    wrapped: dict[int, tuple[AnyFunctionTool, AnyFunctionTool]],
    runner: Callable[[ToolCall, Callable[[ToolCall], Awaitable[Any]]], Awaitable[Any]],
) -> None:
    """Put the agent's own function tools in this inference's list, wrapped (in place).

    livekit executes the tools ``llm_node`` leaves in its list. Only the agent's own tools are
    wrapped: a toolset's members stay as they are, since livekit routes them to the toolset's
    executor by membership. A tool the agent adds later (``update_tools``) is wrapped at the
    next inference; each is wrapped once.
    """
    own = {id(tool) for tool in agent.tools if isinstance(tool, (FunctionTool, RawFunctionTool))}
    for index, tool in enumerate(tools):
        if id(tool) not in own:
            continue
        kept = wrapped.get(id(tool))
        if kept is None or kept[0] is not tool:
            kept = (tool, wrap_tool(tool, runner))
            wrapped[id(tool)] = kept
        tools[index] = kept[1]
