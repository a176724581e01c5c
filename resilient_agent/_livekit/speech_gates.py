"""The chain's say over two livekit calls that protect speech: ``interrupt`` and ``disallow``.

* ``session.interrupt()`` without ``force`` raises ``RuntimeError`` on livekit-agents 1.8 when the
  current speech is protected. While the chain has a ``decide_interrupt`` hook, such a call asks
  it; on ``defer`` livekit's own ``interrupt`` still runs (it interrupts the interruptible
  background speeches before it refuses), its refusal for that protected speech is swallowed and
  the speech plays to the end. The speeches queued behind it are interrupted as livekit's
  interrupt does when the current speech allows it (up to the first queued speech that disallows
  interruptions: it and those behind it play), so a reply asked for next is not heard after a
  queued reply the caller no longer waits for; the caller gets livekit's kind of future, done
  once those speeches are. ``force=True``, and every call that would not raise, go to livekit
  unchanged.
* A tool's ``ctx.disallow_interruptions()`` asks ``decide_protection`` first (``decline`` leaves
  the speech as it is and returns); when livekit then resumed a speech it had paused for the
  caller (its false-interruption pause; the tool's protection releases it, synchronously), the
  chain is asked ``decide_resume`` before a frame of it plays.

The shadows are installed through :class:`~resilient_agent._livekit.interception.Interceptor`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from livekit.agents import AgentSession, RunContext
from livekit.agents.voice.speech_handle import SpeechHandle

from .._engine.chain import ChainDecisions
from .._engine.log import get_logger
from .._engine.requests import (
    InterruptDecision,
    InterruptRequest,
    ProtectionDecision,
    ProtectionRequest,
    ResumeRequest,
)
from .compat import queued_speeches
from .interception import Interceptor

__all__ = [
    "InterruptGate",
    "ProtectionGate",
    "interrupt_deferring_to",
    "interrupt_queued_speeches",
    "protected_current_speech",
]

logger = get_logger("speech_gates")


def protected_current_speech(session: AgentSession[Any]) -> SpeechHandle | None:
    """The current speech if a non-forced interrupt cannot cut it, else None."""
    current = session.current_speech
    if current is None or current.allow_interruptions or current.done() or current.interrupted:
        return None
    return current


class InterruptGate:
    """Shadows ``session.interrupt`` so a refusal for a protected speech asks the chain.

    Args:
        chain: Asked through ``decide_interrupt``.
    """

    def __init__(self, chain: ChainDecisions) -> None:
        self._chain = chain

    def install(self, interceptor: Interceptor) -> None:
        """Shadow ``session.interrupt`` on the session instance."""
        chain = self._chain
        session = chain.ctx.session

        def shadow(original: Callable[..., asyncio.Future[None]]) -> Callable[..., Any]:
            def interrupt(*, force: bool = False) -> asyncio.Future[None]:
                protected = None if force else protected_current_speech(session)
                if protected is None:
                    return original(force=force)
                answer = chain.decide("decide_interrupt", InterruptRequest(speech=protected))
                if not isinstance(answer, InterruptDecision) or answer.action != "defer":
                    return original(force=force)
                return interrupt_deferring_to(protected, session, original, force=force)

            return interrupt

        interceptor.install("AgentSession.interrupt", session, shadow)


def interrupt_deferring_to(
    protected: SpeechHandle,
    session: AgentSession[Any],
    original: Callable[..., asyncio.Future[None]],
    *,
    force: bool,
    on_deferred: Callable[[], None] | None = None,
) -> asyncio.Future[None]:
    """Run livekit's interrupt; if livekit refuses it for ``protected``, interrupt the queue.

    livekit's own ``interrupt`` still runs first: it interrupts the interruptible background
    speeches and raises for the protected one, which then plays to its end, before it reaches the
    speeches queued behind it. Those are interrupted here as livekit's loop would have; the
    future is done once they are (at once when there were none).
    """
    try:
        return original(force=force)
    except RuntimeError:
        if protected_current_speech(session) is not protected:
            raise  # not the protected speech's refusal
    if on_deferred is not None:
        on_deferred()
    why = (
        "session.interrupt() met a protected speech, which plays to its end; the speeches queued "
        "behind it are interrupted as livekit's interrupt does"
    )
    return _when_done(interrupt_queued_speeches(session, why=why))


def interrupt_queued_speeches(
    session: AgentSession[Any],
    *,
    why: str,
    only: Callable[[SpeechHandle], bool] | None = None,
) -> list[SpeechHandle]:
    """Interrupt the speeches queued behind the current one, as ``AgentActivity.interrupt()`` does.

    In playout order, up to the first that disallows interruptions: it and those behind it play.
    The current speech is left alone.

    Args:
        session: The session whose queue is interrupted.
        why: Logged with the ids of the speeches interrupted, if any.
        only: If given, the queued speeches it declines are left to play.

    Returns:
        The speeches interrupted.
    """
    interrupted: list[SpeechHandle] = []
    for speech in queued_speeches(session) or ():
        if speech.done() or speech.interrupted:
            continue
        if not speech.allow_interruptions:
            # livekit's own rule: the speeches from here on play, in order
            break
        if only is None or only(speech):
            interrupted.append(speech.interrupt())
    if interrupted:
        logger.info("queued_speeches_interrupted", speeches=[s.id for s in interrupted], why=why)
    return interrupted


def _when_done(speeches: list[SpeechHandle]) -> asyncio.Future[None]:
    done: asyncio.Future[None] = asyncio.Future()  # as livekit's own interrupt makes it

    def on_done(_: SpeechHandle) -> None:
        if not done.done() and all(s.done() for s in speeches):
            done.set_result(None)

    if not speeches:
        done.set_result(None)
    for speech in speeches:
        speech.add_done_callback(on_done)
    return done


class ProtectionGate:
    """Shadows one call's ``run_context.disallow_interruptions`` (the context is per call).

    Args:
        chain: Asked through ``decide_protection`` and ``decide_resume``.
        run_context: The tool call's context.
        tool: The tool's name.
    """

    def __init__(self, chain: ChainDecisions, run_context: RunContext[Any], tool: str) -> None:
        self._chain = chain
        self._run_context = run_context
        self._tool = tool

    def install(self, interceptor: Interceptor) -> None:
        """Shadow ``disallow_interruptions`` on this call's ``RunContext``."""
        interceptor.install("RunContext.disallow_interruptions", self._run_context, self._shadow)

    def _shadow(self, original: Callable[[], None]) -> Callable[[], None]:
        chain, run_context, tool = self._chain, self._run_context, self._tool
        session = chain.ctx.session

        def disallow_interruptions() -> None:
            handle = run_context.speech_handle
            request = ProtectionRequest(tool=tool, speech=handle)
            answer = chain.decide("decide_protection", request)
            if isinstance(answer, ProtectionDecision) and answer.action == "decline":
                return  # the declining middleware reports why
            # livekit pauses only interruptible speeches for the caller (agent "listening");
            # protecting such a speech releases that pause inside livekit's call
            paused = (
                handle is session.current_speech
                and handle.allow_interruptions
                and not handle.interrupted
                and not handle.done()
                and session.agent_state == "listening"
            )
            original()
            if paused and chain.handles("decide_resume"):
                # a middleware answering hold paused the speech itself and reports it
                chain.decide("decide_resume", ResumeRequest(tool=tool, speech=handle))

        return disallow_interruptions
