"""The agents livekit starts after the first one: their own plugins meet the lab's rule too.

A tool that returns another agent, or awaits an ``AgentTask`` built with its own ``llm=`` or
``tts=``, creates those plugin instances at call time: the lab never saw them when it loaded the
app. livekit announces every agent it starts with an ``AgentHandoff`` item
(``conversation_item_added``), emitted just before it starts the agent's activity, where the
plugins are first used: there the lab applies the first agent's rule to them (on a stack, point
them at its emulators; without one, refuse a provider plugin). One it refuses is swapped for the
session's own (the lab's) with ``Agent.update_options`` before livekit starts the agent, so it
never reaches its provider, and the call fails with a line naming it (the
``own_plugins_stay_in_the_lab`` contract).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from livekit.agents import Agent, AgentSession, ConversationItemAddedEvent
from livekit.agents.llm import AgentHandoff

from .redirect import NotRedirectable, own_plugins

__all__ = ["LaterAgents", "PluginRule", "watch_later_agents"]

PluginRule = Callable[[str, Any, str], "str | None"]
"""``(role, instance, agent label)`` to the instance redirected, described, or None when it is
kept as it is; raises :class:`~resilient_agent.testing.redirect.NotRedirectable` to refuse it."""


@dataclass
class LaterAgents:
    """What the lab did with the plugins of the agents started after the first, in one call.

    Attributes:
        redirected: Each instance pointed at an emulator (``"Specialist's own openai.LLM(...)"``).
        refused: Each instance that could not be, with why; the session's own played its part.
        instances: The redirected instances, for the call's end to close.
    """

    redirected: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    instances: list[Any] = field(default_factory=list)


def watch_later_agents(session: AgentSession[Any], first: Agent, rule: PluginRule) -> LaterAgents:
    """Apply ``rule`` to the own plugins of every agent ``session`` starts after ``first``.

    Register before ``session.start``; ``first`` was handled before the call (its refusal is an
    error before any call, not a failed call).
    """
    seen: list[Agent] = [first]
    later = LaterAgents()

    def on_item(event: ConversationItemAddedEvent) -> None:
        if not isinstance(event.item, AgentHandoff):
            return
        # livekit sets the agent it is starting as the current one before it announces it
        agent = session.current_agent
        if agent.id != event.item.new_agent_id or any(agent is old for old in seen):
            return
        seen.append(agent)
        label = type(agent).__name__
        for role, instance in own_plugins(agent):
            try:
                described = rule(role, instance, label)
            except Exception as exc:  # the event emitter would swallow it: the plugin unchecked
                why = (
                    str(exc)
                    if isinstance(exc, NotRedirectable)
                    else f"{label}'s own {role} {type(instance).__qualname__} could not be "
                    f"redirected ({type(exc).__name__}: {exc})"
                )
                # the agent is not running yet: update_options only replaces what it will use
                agent.update_options(**{role: getattr(session, role)})
                later.refused.append(f"{why}; the lab's own {role} played its part instead")
                continue
            if described is not None:
                later.redirected.append(f"{label}'s own {described}")
                later.instances.append(instance)

    session.on("conversation_item_added", on_item)
    return later
