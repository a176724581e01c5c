"""Recovered words answered as the caller's turn, the way livekit answers a committed turn.

When the Watchdog restarts a stuck VAD over a non-streaming STT, livekit ends the caller's turn
with no transcript: its ``StreamAdapter`` transcribes an utterance only at the VAD's end of
speech, which the dead VAD never gave, so livekit's turn never holds the words, and no public
livekit call gives it any. The TurnKeeper re-transcribes them from its kept audio; they are the
turn livekit would have committed. livekit answers a committed turn at once, through the agent's
``on_user_turn_completed`` (where an app says its filler, edits the message or the turn's
context, or raises ``StopResponse``), and then with a reply to that message in the context the
hook left. :func:`answer_as_user_turn` takes the same steps with the public API, so the app
behaves as it does for every other turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from livekit.agents import StopResponse, llm

from resilient_agent import MiddlewareContext, get_logger

__all__ = ["answer_as_user_turn"]

logger = get_logger("middleware.turn_keeper")


async def answer_as_user_turn(
    ctx: MiddlewareContext, text: str, *, spoken: bool, extra: Mapping[str, Any] | None = None
) -> llm.ChatMessage | None:
    """Run the agent's ``on_user_turn_completed`` for ``text``, then reply to it.

    As livekit's own turn: an interruptible speech still current is interrupted first (a
    protected one never reaches here: the answerer waits for it), the hook gets a copy of the
    agent's context and the new message, and the reply answers the message as the hook left it
    in that context. ``StopResponse`` means no reply (the chain's ``wrap_user_turn`` keeps the
    words in the history); a hook that fails otherwise is logged and the words answered anyway,
    as the TurnKeeper answers a turn whose hook failed.

    Args:
        ctx: The session's context.
        text: The caller's words.
        spoken: The words were spoken (audio), not typed.
        extra: The message's ``extra`` (which of its words were typed, when it merges typed
            and spoken words).

    Returns:
        The message replied to, or None when the app stopped the reply.
    """
    session = ctx.session
    current = session.current_speech
    if current is not None and current.allow_interruptions and not current.done():
        current.interrupt()
    message = llm.ChatMessage(role="user", content=[text], extra=dict(extra or {}))
    turn_ctx = ctx.agent.chat_ctx.copy()
    try:
        await ctx.agent.on_user_turn_completed(turn_ctx, new_message=message)
    except StopResponse:
        return None
    except Exception as exc:  # the app's hook must not cost the caller their answer
        logger.error("app_user_turn_hook_raised", exc_info=exc)
    session.generate_reply(
        user_input=message, chat_ctx=turn_ctx, input_modality="audio" if spoken else "text"
    )
    return message
