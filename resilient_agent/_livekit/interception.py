"""The one place where resilient-agent replaces an attribute of a livekit object.

livekit-agents 1.8 has no hook for a few decisions the chain must take inside livekit's own call
(may this hang-up go through; may this interrupt cut a protected speech; may a tool protect its
speech). For those, and only those, a method is shadowed *on the instance* (never on the class)
while one agent runs, and the shadow asks the chain. One object's class is swapped instead: the
session's audio input, whose frames the middleware are shown (:meth:`Interceptor.swap_class`).
:data:`INTERCEPTIONS` is the whole list, with the reason for each; :class:`Interceptor` refuses
anything not in it.

Rules every interception follows:

* installed per instance, restored in LIFO order when the agent leaves (or the tool returns);
* restored only if the attribute is still ours: a shadow installed after ours (by the app, a
  test, another library) is left in place, and the reason is logged
  (``interception_not_restored``);
* what was on the instance before (another shadow) is put back, not deleted.

The livekit behaviours the shadows rely on are listed in :mod:`resilient_agent._livekit.compat`
(``RELIED_ON``) and pinned by ``tests/test_compat.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from .._engine.log import get_logger

__all__ = ["INTERCEPTIONS", "ClassNotSwapped", "Gate", "Interception", "Interceptor"]

logger = get_logger("interception")


@dataclass(frozen=True)
class Interception:
    """One livekit attribute the library shadows.

    Attributes:
        target: ``AgentSession``, ``JobContext``, ``RunContext``, ``Agent`` (a plain agent
            or workflow task the session's runtime supervises), ``RealtimeSession`` (the
            active agent's realtime model session) or ``AudioInput`` (the session's audio input).
        attribute: The method's name, or ``__class__`` for a class swap.
        owner: The module whose shadow replaces it.
        hook: The chain hooks the shadow asks, or the ``MiddlewareContext`` services it serves
            (comma-separated).
        why: Why no public hook does it.
    """

    target: str
    attribute: str
    owner: str
    hook: str
    why: str

    @property
    def key(self) -> str:
        """``target.attribute``."""
        return f"{self.target}.{self.attribute}"


_ALL = (
    Interception(
        "AgentSession",
        "shutdown",
        "resilient_agent._livekit.shutdown",
        "decide_shutdown",
        "the app's hang-up (a tool, a speech-done callback, a task, livekit's EndCallTool) "
        "must wait for the farewell and may be vetoed; livekit has no pre-close hook",
    ),
    Interception(
        "AgentSession",
        "aclose",
        "resilient_agent._livekit.shutdown, resilient_agent._livekit.close_hold",
        "decide_shutdown",
        "awaited inside a tool body it deadlocks (the close waits for the tool); there it "
        "becomes a hang-up request instead. Everywhere else it passes through, and (the "
        "close hold's shadow) returns only once the chain has stopped: livekit awaits no close "
        "listener, so on_session_end and every aclose would outlive the close",
    ),
    Interception(
        "JobContext",
        "shutdown",
        "resilient_agent._livekit.shutdown",
        "decide_shutdown",
        "the app's job-level hang-up, same as session.shutdown; it passes through once the "
        "session is closing (livekit's EndCallTool shuts the job down from the close event)",
    ),
    Interception(
        "AgentSession",
        "interrupt",
        "resilient_agent._livekit.speech_gates, resilient_agent._livekit.handoff_gates",
        "decide_interrupt",
        "livekit raises on a non-forced interrupt of a protected speech; RoomIO's text input "
        "and the DTMF workflow then lose the caller's message (also while a handoff drains "
        "the leaving agent's protected speech, when no agent's chain is in place)",
    ),
    Interception(
        "AgentSession",
        "generate_reply",
        "resilient_agent._livekit.handoff_gates, resilient_agent._livekit.protected_lines",
        "decide_interrupt, model_input",
        "while a handoff pauses speech scheduling livekit raises on generate_reply(user_input"
        "=...) and RoomIO's text input loses the typed words; the refused input is kept for "
        "the next agent (the leaving keeper's choice, made as it answers decide_interrupt) "
        "and livekit's error is raised unchanged. On a realtime model with server turn "
        "detection livekit drops allow_interruptions=False (a warning) and the caller's "
        "barge-in cuts the app's protected line: the reply is made without it and its handle "
        "protected, which livekit honours (and RealtimeInputHold holds the model's input)",
    ),
    Interception(
        "AgentSession",
        "say",
        "resilient_agent._livekit.protected_lines",
        "model_input",
        "on a realtime model with server turn detection (a TTS beside it) livekit drops "
        "allow_interruptions=False (a warning) and the caller's barge-in cuts the app's "
        "protected line: the speech is made without it and its handle protected, which "
        "livekit honours (and RealtimeInputHold holds the model's input)",
    ),
    Interception(
        "Agent",
        "on_enter",
        "resilient_agent._session.supervision",
        "decide_interrupt",
        "a plain Agent or workflow task the call is handed to (not rebased on "
        "ResilientAgent): its start ends the handoff the session's runtime followed",
    ),
    Interception(
        "Agent",
        "on_exit",
        "resilient_agent._session.supervision",
        "decide_interrupt, decide_shutdown",
        "a plain Agent or workflow task leaving: a handoff begins (typed input is kept "
        "through it) or the session closes (hung tools are bounded)",
    ),
    Interception(
        "Agent",
        "on_user_turn_completed",
        "resilient_agent._session.supervision",
        "wrap_user_turn",
        "a plain Agent or workflow task's user turns go through the chain that handed "
        "control to it; livekit calls the hook by attribute, and has no session-level one",
    ),
    Interception(
        "Agent",
        "llm_node",
        "resilient_agent._session.supervision",
        "wrap_llm_request, wrap_tool_call",
        "a plain Agent or workflow task's inferences go through the chain, and its own "
        "function tools are run through wrap_tool_call (livekit executes the tools the node "
        "hands back)",
    ),
    Interception(
        "Agent",
        "on_user_turn_exceeded",
        "resilient_agent._session.cut_in",
        "on_speech_created",
        "livekit's user_turn_limit cuts in over a caller who talks too long, on purpose: "
        "the speeches this hook creates are marked cut-ins (SpeechInfo.cut_in), which the "
        "chain never holds for the caller; livekit calls the hook by attribute and marks "
        "the speech nowhere",
    ),
    Interception(
        "RealtimeSession",
        "push_audio",
        "resilient_agent._session.model_input",
        "on_speech_created, on_speech_done",
        "livekit feeds a realtime model silence for the caller's audio while a protected "
        "speech plays, which its server VAD hears as the end of the caller's turn; held "
        "(for the length of that speech only), the model hears nothing until it is sent the "
        "caller's kept audio",
    ),
    Interception(
        "RunContext",
        "disallow_interruptions",
        "resilient_agent._livekit.speech_gates",
        "decide_protection, decide_resume",
        "it raises on an interrupted speech (failing the tool), and it resumes a speech "
        "livekit paused for the caller, synchronously, over a caller who may be talking",
    ),
    Interception(
        "AudioInput",
        "__class__",
        "resilient_agent._session.session_audio",
        "observe_audio",
        "the middleware must hear the caller's audio while a protected speech plays, when "
        "livekit gives Agent.stt_node silence; the session's audio input (the app's object) "
        "gets a subclass of its own class whose __anext__ shows each frame to the callbacks "
        "registered through MiddlewareContext.observe_audio, and its own class back when the "
        "last one leaves, it is replaced, or the session ends",
    ),
)

INTERCEPTIONS: Mapping[str, Interception] = MappingProxyType({i.key: i for i in _ALL})
"""Every livekit attribute the library replaces, by ``target.attribute``."""


@dataclass(slots=True)
class _Installed:
    spec: Interception
    instance: Any
    replacement: Callable[..., Any]
    saved: Any


@dataclass(slots=True)
class _Swapped:
    spec: Interception
    instance: Any
    own_class: type[Any]
    subclass: type[Any]


def _lay_out_anew(instance: Any) -> None:
    """Give ``instance``, whose class was just assigned, a fresh dict with the same attributes.

    CPython 3.11 and later lay an instance's attributes out for the class it was made with, and
    keep that layout through a ``__class__`` assignment: the interpreter then reads them on its
    slow path, for the rest of the object's life (the app's audio input: every read of its
    attributes, by its own ``__anext__`` and by livekit, frame after frame, also once its own
    class is back). A new dict holding the same attributes is read on the fast path under any
    class. Only the dict object is new: code that kept the old one (``vars(instance)``) would no
    longer see the instance's attributes, which nothing in livekit does.
    """
    try:
        attributes = instance.__dict__
    except AttributeError:
        return  # its attributes are slots: laid out by the class itself
    with contextlib.suppress(AttributeError, TypeError):
        instance.__dict__ = dict(attributes)


class ClassNotSwapped(TypeError):
    """An instance took a ``__class__`` assignment without its type changing (a proxy, a mock)."""


class Gate(Protocol):
    """The one shape of every gate: it installs its shadows into its owner's interceptor.

    The owner undoes every gate it installed with ``interceptor.restore_all()``; a gate that
    follows something besides the shadowed methods (a session event) registers its teardown
    with :meth:`Interceptor.on_restore`, so there is one way to remove any gate.
    """

    def install(self, interceptor: Interceptor) -> None:
        """Shadow the methods this gate decides for."""


class Interceptor:
    """Installs shadows on livekit instances and restores them, last installed first."""

    def __init__(self) -> None:
        self._installed: list[_Installed | _Swapped | Callable[[], None]] = []

    def on_restore(self, teardown: Callable[[], None]) -> None:
        """Run ``teardown`` when :meth:`restore_all` reaches it (in LIFO order with shadows)."""
        self._installed.append(teardown)

    def install(
        self,
        key: str,
        instance: Any,
        shadow: Callable[[Callable[..., Any]], Callable[..., Any]],
    ) -> None:
        """Shadow ``INTERCEPTIONS[key]`` on ``instance`` with ``shadow(original)``.

        Args:
            key: ``target.attribute``, as in :data:`INTERCEPTIONS`.
            instance: The livekit object.
            shadow: Builds the replacement from what the attribute resolved to before.

        Raises:
            KeyError: ``key`` is not in :data:`INTERCEPTIONS` (add it there, with the reason), or
                it is a class swap (:meth:`swap_class`).
        """
        spec = INTERCEPTIONS[key]
        if spec.attribute == "__class__":
            raise KeyError(f"{key} swaps a class: use swap_class")
        saved = vars(instance).get(spec.attribute)
        replacement = shadow(getattr(instance, spec.attribute))
        setattr(instance, spec.attribute, replacement)
        self._installed.append(_Installed(spec, instance, replacement, saved))

    def swap_class(self, key: str, instance: Any, subclass: type[Any]) -> None:
        """Give ``instance`` the class ``subclass`` (made on its own) for ``INTERCEPTIONS[key]``.

        Restored like a shadow: its own class is put back unless something changed the class
        after ours (then it is left, and the reason logged).

        Args:
            key: ``target.__class__``, as in :data:`INTERCEPTIONS`.
            instance: The livekit object.
            subclass: A subclass of ``type(instance)``.

        Raises:
            KeyError: ``key`` is not a class swap in :data:`INTERCEPTIONS`.
            ClassNotSwapped: The assignment was taken without changing the instance's type.
            TypeError: The class refuses the assignment (also AttributeError); the instance keeps
                its own class.
        """
        spec = INTERCEPTIONS[key]
        if spec.attribute != "__class__":
            raise KeyError(f"{key} shadows a method: use install")
        own_class = type(instance)
        instance.__class__ = subclass
        if type(instance) is not subclass:
            with contextlib.suppress(Exception):
                instance.__class__ = own_class
            raise ClassNotSwapped("its __class__ assignment does not change its type")
        _lay_out_anew(instance)
        self._installed.append(_Swapped(spec, instance, own_class, subclass))

    @property
    def installed(self) -> tuple[str, ...]:
        """The keys of the shadows (and class swaps) in place, in install order."""
        return tuple(i.spec.key for i in self._installed if isinstance(i, _Installed | _Swapped))

    def restore_all(self) -> None:
        """Restore every shadow, last installed first; one that is no longer ours is left."""
        while self._installed:
            item = self._installed.pop()
            if isinstance(item, _Installed):
                self._restore(item)
            elif isinstance(item, _Swapped):
                self._put_class_back(item)
            else:
                item()

    def _put_class_back(self, item: _Swapped) -> None:
        found = type(item.instance)
        if found is not item.subclass:
            logger.warning(
                "interception_not_restored",
                interception=item.spec.key,
                found=found.__qualname__,
                why=(
                    "the class was changed by someone else after resilient-agent swapped it; "
                    "restoring would undo that change, so it is left in place"
                ),
            )
            return
        try:
            item.instance.__class__ = item.own_class
        except (TypeError, AttributeError) as exc:  # pragma: no cover - the swap in did work
            logger.warning(
                "interception_not_restored",
                interception=item.spec.key,
                found=found.__qualname__,
                why=f"{type(exc).__name__}: {exc}",
            )
            return
        _lay_out_anew(item.instance)

    def _restore(self, item: _Installed) -> None:
        attribute = item.spec.attribute
        current = vars(item.instance).get(attribute)
        if current is not item.replacement:
            logger.warning(
                "interception_not_restored",
                interception=item.spec.key,
                why=(
                    "something replaced it after resilient-agent did; restoring would undo that "
                    "replacement, so it is left in place"
                ),
            )
            return
        if item.saved is not None:
            setattr(item.instance, attribute, item.saved)
        else:
            delattr(item.instance, attribute)
