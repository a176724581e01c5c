"""An example resilient-agent middleware plugin: ``speaking_guard``.

Installed, it is loaded by name: ``ResilientAgent(plugins=["speaking_guard"])`` or
``RESILIENT_AGENT_PLUGINS=speaking_guard``. See ``docs/plugins.md`` in resilient-agent.
"""

from __future__ import annotations

from .guard import DEFAULT_GUARDED_TOOLS, REFUSAL, SpeakingGuard

__version__ = "0.1.0"

__all__ = ["DEFAULT_GUARDED_TOOLS", "REFUSAL", "SpeakingGuard"]
