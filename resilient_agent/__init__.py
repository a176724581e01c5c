"""resilient-agent: race-free voice agents on LiveKit Agents.

``ResilientAgent`` is a drop-in ``livekit.agents.Agent`` whose tool calls, speeches and session
events run through a middleware chain; ``resilient_agent.testing`` is the offline race lab.
"""

from __future__ import annotations

# isort: off
# first: on a livekit-agents too old to import the library, the import fails with the fix
from . import versions  # noqa: F401

# isort: on
from .agent import ResilientAgent, default_middleware
from .boundary import DEFAULT_HOOK_BUDGET_S
from .cut_in import cut_in
from .end_call import end_call_tool
from .errors import MiddlewareError, MiddlewareNotUsed, PluginError
from .events import MiddlewareErrorEvent, RaceDetectedEvent, RaceHandledEvent, UnknownToolEvent
from .hooks import HOOKS, InferenceNext, Middleware, Position, ToolCallNext, UserTurnNext
from .listeners import event_listener
from .log import get_logger
from .options import OptionChecker, OptionError
from .plugins import available_plugins, prewarm_plugins
from .report import CallReport
from .requests import (
    InferenceRequest,
    InterruptDecision,
    InterruptRequest,
    ProtectionDecision,
    ProtectionRequest,
    ResumeDecision,
    ResumeRequest,
    ShutdownDecision,
    ShutdownRequest,
    SpeechDecision,
    SpeechInfo,
    ToolCall,
    ToolOutcome,
    UserTurn,
)
from .speaking import LineCannotBeSpoken, speak_line
from .spec import MiddlewareSpec
from .speech_gates import interrupt_queued_speeches
from .state import CloseReason, ConversationState, MiddlewareContext
from .supervision import unsupervised
from .tools import current_tool, release_tool_call
from .versions import __version__ as __version__
from .versions import has_capability

__all__ = [
    "DEFAULT_HOOK_BUDGET_S",
    "HOOKS",
    "CallReport",
    "CloseReason",
    "ConversationState",
    "InferenceNext",
    "InferenceRequest",
    "InterruptDecision",
    "InterruptRequest",
    "LineCannotBeSpoken",
    "ProtectionDecision",
    "ProtectionRequest",
    "ResumeDecision",
    "ResumeRequest",
    "Middleware",
    "MiddlewareContext",
    "MiddlewareError",
    "MiddlewareErrorEvent",
    "MiddlewareNotUsed",
    "MiddlewareSpec",
    "OptionChecker",
    "OptionError",
    "PluginError",
    "Position",
    "RaceDetectedEvent",
    "RaceHandledEvent",
    "ResilientAgent",
    "ShutdownDecision",
    "ShutdownRequest",
    "SpeechDecision",
    "SpeechInfo",
    "ToolCall",
    "ToolCallNext",
    "ToolOutcome",
    "UserTurn",
    "UnknownToolEvent",
    "UserTurnNext",
    "available_plugins",
    "current_tool",
    "cut_in",
    "default_middleware",
    "end_call_tool",
    "event_listener",
    "get_logger",
    "has_capability",
    "interrupt_queued_speeches",
    "prewarm_plugins",
    "release_tool_call",
    "speak_line",
    "unsupervised",
]
