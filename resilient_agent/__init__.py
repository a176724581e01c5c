"""resilient-agent: race-free voice agents on LiveKit Agents.

``ResilientAgent`` is a drop-in ``livekit.agents.Agent`` whose tool calls, speeches and session
events run through a middleware chain; ``resilient_agent.testing`` is the offline race lab.
"""

from __future__ import annotations

# isort: off
# first: on a livekit-agents too old to import the library, the import fails with the fix
from ._livekit import versions  # noqa: F401

# isort: on
from ._engine.boundary import DEFAULT_HOOK_BUDGET_S
from ._engine.errors import MiddlewareError, MiddlewareNotUsed, PluginError
from ._engine.events import (
    MiddlewareErrorEvent,
    RaceDetectedEvent,
    RaceHandledEvent,
    UnknownToolEvent,
)
from ._engine.hooks import (
    HOOKS,
    InferenceNext,
    Middleware,
    Position,
    ToolCallNext,
    UserTurnNext,
    never_waits,
)
from ._engine.listeners import event_listener
from ._engine.log import get_logger
from ._engine.options import OptionChecker, OptionError
from ._engine.plugins import available_plugins, prewarm_plugins
from ._engine.requests import (
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
from ._engine.spec import MiddlewareSpec
from ._engine.state import CloseReason, ConversationState, MiddlewareContext
from ._livekit.end_call import end_call_tool
from ._livekit.speech_gates import interrupt_queued_speeches
from ._livekit.versions import __version__ as __version__
from ._livekit.versions import has_capability
from ._session.agent import ResilientAgent, default_middleware
from ._session.cut_in import cut_in
from ._session.loudness import frame_mean_square
from ._session.model_audio import ModelAudio
from ._session.reply_audio import ReplyAudio, Synthesis
from ._session.report import CallReport
from ._session.speaking import LineCannotBeSpoken, speak_line
from ._session.supervision import unsupervised
from ._session.tools import current_tool, release_tool_call
from ._session.tracing import set_trace_content

__all__ = [
    "DEFAULT_HOOK_BUDGET_S",
    "HOOKS",
    "CallReport",
    "ModelAudio",
    "ReplyAudio",
    "Synthesis",
    "frame_mean_square",
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
    "never_waits",
    "get_logger",
    "has_capability",
    "interrupt_queued_speeches",
    "prewarm_plugins",
    "release_tool_call",
    "set_trace_content",
    "speak_line",
    "unsupervised",
]
