"""Tool-call races: user turns never wait for a running tool, and protection never fails a tool.

While a tool body runs after its step's text has played out, livekit treats the tool's owning
speech as a background speech: a committed user turn interrupts it and waits for the tool (up to
the 5 s ``INTERRUPTION_TIMEOUT``, after which livekit cancels the speech and the tool result is
never spoken). The guard protects the owning speech for exactly that stretch, so livekit answers
the caller at once and speaks the tool's result afterwards, and restores the app's setting
before the result is voiced.

``ctx.disallow_interruptions()`` raises when the owning speech was already interrupted; inside a
guarded tool it never fails the tool: the interruption stands (the caller has been heard), the
tool goes on, and its result reaches the history as livekit commits it.

Per-tool policies, set by tool name (``ToolGuard(policies={"transfer_call": "yield_to_user"})``):

* ``guard`` (default): as above;
* ``protect``: the tool's owning speech and every speech its body creates are protected;
* ``allow``: the caller may interrupt the tool's speeches, whatever the tool asks
  (``disallow_interruptions()`` and ``say(..., allow_interruptions=False)`` are overridden);
* ``yield_to_user``: if the caller is speaking when the tool is about to run, the body does not
  run; the LLM is told to read the caller's next turn with this one and call the tool again if it
  is still needed (the turn keeper delivers the caller's words with that next turn);
* ``cancel`` (default for tools flagged ``ToolFlag.CANCELLABLE``): the caller may interrupt the
  tool. When its owning speech is interrupted while the body runs, the body is cancelled
  (``CancelledError``, its ``finally`` blocks run) and the LLM gets a ``ToolError`` saying the
  caller spoke first, so the interrupted speech ends at once and the caller is answered without
  livekit's 5 s wait. The owning speech is never protected, so livekit's own ``cancel_task`` tool
  keeps working for these tools.

``timeouts`` (seconds, by tool name) cancel a body that runs too long: it receives
``CancelledError`` (its ``finally`` blocks run) and the LLM gets a ``ToolError`` it can voice.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Collection, Mapping
from functools import partial
from typing import Any, Literal

from livekit.agents import RunContext
from livekit.agents.llm import ToolError
from livekit.agents.voice import events as lk_events

from resilient_agent import (
    Middleware,
    MiddlewareContext,
    OptionChecker,
    ProtectionDecision,
    ProtectionRequest,
    SpeechDecision,
    SpeechInfo,
    ToolCall,
    ToolCallNext,
    get_logger,
    release_tool_call,
)

__all__ = ["ToolGuard", "ToolPolicy"]

ToolPolicy = Literal["guard", "protect", "allow", "yield_to_user", "cancel"]
_POLICIES: tuple[ToolPolicy, ...] = ("guard", "protect", "allow", "yield_to_user", "cancel")
YIELD_MESSAGE = (
    "The caller was still speaking, so this was not done. Read the caller's next message "
    "together with this request, and call the tool again if it is still needed."
)

logger = get_logger("middleware.tool_guard")

_RELEASED_MESSAGE = (
    "The caller spoke while {tool} was still running. It goes on in the background and its "
    "result will be given to you when it finishes: answer the caller now, do not call {tool} "
    "again and do not guess its result."
)


class ToolGuard(Middleware):
    """Keeps tool bodies from blocking user turns and from failing on protection (on by default).

    Args:
        policies: Tool name to policy (``guard``, ``protect``, ``allow``, ``yield_to_user``).
        timeouts: Tool name to the seconds its body may run.
    """

    position = "first"

    def __init__(
        self,
        *,
        policies: dict[str, ToolPolicy] | None = None,
        timeouts: dict[str, float] | None = None,
    ) -> None:
        check = OptionChecker(self.display_name)
        policy = partial(check.choice, choices=_POLICIES, what="a policy")
        seconds = partial(check.number, gt=0, le=3600)
        self.policies: dict[str, ToolPolicy] = {}
        if policies is not None:
            example = "{'transfer_call': 'protect'}"
            self.policies = check.per_tool("policies", policies, policy, example=example)
        self.timeouts: dict[str, float] = {}
        if timeouts is not None:
            example = "{'lookup_order': 10.0}"
            self.timeouts = check.per_tool("timeouts", timeouts, seconds, example=example)
        # the policy each tool that ran got (a CANCELLABLE flag makes the default differ)
        self._policy_of: dict[str, ToolPolicy] = {}
        # speeches a tool body itself protected with ctx.disallow_interruptions()
        # made when a tool first protects one (most calls have none)
        self._protected_by_tool: weakref.WeakSet[Any] | None = None

    def option_tool_names(self) -> Mapping[str, Collection[str]]:
        """The tools ``policies`` and ``timeouts`` name."""
        return {"policies": self.policies.keys(), "timeouts": self.timeouts.keys()}

    def decide_speech(self, ctx: MiddlewareContext, speech: SpeechInfo) -> SpeechDecision | None:
        """Speeches a ``protect`` or ``allow`` tool creates follow its policy."""
        policy = self.policies.get(speech.tool or "")
        if policy == "protect":
            return SpeechDecision.protect(f"tool {speech.tool} is protected")
        if policy == "allow":
            return SpeechDecision.allow(f"tool {speech.tool} may be interrupted")
        return None

    def decide_protection(
        self, ctx: MiddlewareContext, request: ProtectionRequest
    ) -> ProtectionDecision | None:
        """``disallow_interruptions()`` never fails a guarded tool, and ``allow`` overrides it."""
        policy = self._policy_of.get(request.tool, "guard")
        if policy == "allow":
            logger.info("protection_overridden", tool=request.tool, policy="allow")
            return ProtectionDecision.decline(f"tool {request.tool} may be interrupted")
        if policy not in ("guard", "yield_to_user"):
            return None  # protect and cancel: livekit's own behaviour
        if self._protected_by_tool is None:
            self._protected_by_tool = weakref.WeakSet()
        self._protected_by_tool.add(request.speech)
        if request.speech.interrupted:
            ctx.race_handled(
                self, "protect_after_interruption", "tool_continued", details={"tool": request.tool}
            )
            return ProtectionDecision.decline("the caller interrupted the speech first")
        return None

    async def wrap_tool_call(
        self, ctx: MiddlewareContext, call: ToolCall, call_next: ToolCallNext
    ) -> Any:
        """Apply the tool's policy, and guard the owning speech while the body runs."""
        policy = self.policies.get(call.name, "cancel" if call.cancellable else "guard")
        self._policy_of[call.name] = policy
        if policy == "yield_to_user" and ctx.state.user_state == "speaking":
            ctx.race_handled(
                self, "tool_over_speaking_caller", "yielded_to_caller", details={"tool": call.name}
            )
            return YIELD_MESSAGE
        timeout = self.timeouts.get(call.name)
        if timeout is None:
            return await self._guarded(ctx, call, call_next, policy)
        try:
            return await asyncio.wait_for(self._guarded(ctx, call, call_next, policy), timeout)
        except asyncio.TimeoutError:
            ctx.race_handled(
                self, "tool_timeout", "cancelled", details={"tool": call.name, "timeout_s": timeout}
            )
            raise ToolError(
                f"The {call.name} tool took longer than {timeout:g} s and was stopped. Tell the "
                "caller it did not work and offer to try again."
            ) from None

    async def _guarded(
        self, ctx: MiddlewareContext, call: ToolCall, call_next: ToolCallNext, policy: ToolPolicy
    ) -> Any:
        run_context = call.run_context
        if run_context is None:
            return await call_next(call)
        handle = run_context.speech_handle
        if policy == "protect" and not handle.interrupted:
            handle.allow_interruptions = False
            return await call_next(call)
        if policy == "cancel":
            return await _cancel_when_interrupted(ctx, call, call_next, run_context)
        app_setting = handle.allow_interruptions
        loop = asyncio.get_running_loop()
        protector = loop.create_task(
            _protect_after_playout(run_context), name="resilient_agent.tool_guard"
        )
        releaser = loop.create_task(
            self._release_when_interrupted(ctx, call.name, run_context),
            name="resilient_agent.tool_guard.release",
        )

        def on_update(ev: lk_events.ToolExecutionUpdatedEvent) -> None:
            # the tool handed control back (its first ctx.update()): what plays from now on
            # is as interruptible as on Agent
            update = ev.update
            if update.type != "tool_call_updated" or update.call_id != call.call_id:
                return
            protector.cancel()
            app_protected = (
                self._protected_by_tool is not None and handle in self._protected_by_tool
            )
            if app_protected or handle.done() or handle.interrupted or handle.allow_interruptions:
                return
            with contextlib.suppress(RuntimeError):
                handle.allow_interruptions = app_setting

        stop_listening = ctx.listen(ctx.session, "tool_execution_updated", on_update, by=self)
        try:
            return await call_next(call)
        finally:
            stop_listening()
            releaser.cancel()
            protector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await protector
            protected = protector.done() and not protector.cancelled() and protector.result()
            app_protected = (
                self._protected_by_tool is not None and handle in self._protected_by_tool
            )
            if protected and not app_protected and not handle.interrupted:
                # the app's own setting applies again to the step that speaks the result
                with contextlib.suppress(RuntimeError):
                    handle.allow_interruptions = app_setting
            with contextlib.suppress(asyncio.CancelledError):
                await releaser

    async def _release_when_interrupted(
        self, ctx: MiddlewareContext, tool: str, run_context: RunContext[Any]
    ) -> None:
        """Once the caller interrupts the owning speech, stop livekit waiting for the body.

        An interrupted speech is done only when its tools are: livekit waits for the body, then
        after 5 s (``INTERRUPTION_TIMEOUT``) cancels the speech arbitrarily and releases the
        tool itself. Meanwhile the caller's turn waits. A preamble the caller talks over is
        interrupted while its tool runs, and a tool that first awaits its own protected hold
        message (queued behind that preamble) then works on always outlives those 5 s.
        """
        handle = run_context.speech_handle
        never = asyncio.get_running_loop().create_future()
        try:
            await handle.wait_if_not_interrupted([never])
        finally:
            never.cancel()
        if not handle.allow_interruptions:
            return  # forced through protection (a close, a handoff): not the caller's turn
        try:
            released = await release_tool_call(run_context, _RELEASED_MESSAGE.format(tool=tool))
        except Exception as error:  # the tool goes on either way; livekit's timer remains
            logger.warning("tool_release_failed", tool=tool, error=repr(error))
            return
        if released:
            ctx.race_handled(
                self, "interrupted_speech_waits_for_tool", "tool_released", details={"tool": tool}
            )


async def _cancel_when_interrupted(
    ctx: MiddlewareContext, call: ToolCall, call_next: ToolCallNext, run_context: RunContext[Any]
) -> Any:
    handle = run_context.speech_handle
    body = asyncio.ensure_future(call_next(call))
    try:
        await handle.wait_if_not_interrupted([body])
    except asyncio.CancelledError:
        # livekit's own cancel_task (or the session closing) cancels the call: stop the body too
        body.cancel()
        raise
    if body.done():
        return body.result()
    body.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await body
    ctx.race_handled(
        "ToolGuard", "tool_interrupted_by_caller", "cancelled", details={"tool": call.name}
    )
    raise ToolError(
        f"The caller spoke before {call.name} finished, so it was stopped. Answer the caller, "
        "and call it again if it is still needed."
    )


async def _protect_after_playout(run_context: RunContext[Any]) -> bool:
    handle = run_context.speech_handle
    await run_context.wait_for_playout()
    if handle.interrupted or handle.done() or not handle.allow_interruptions:
        return False
    handle.allow_interruptions = False
    return True
