"""Recovered words answered as the caller's turn take livekit's steps for a committed turn: an
interruptible speech interrupted, the agent's ``on_user_turn_completed`` with a copy of its
context, then a reply to the message in the context the hook left; ``StopResponse`` stops the
reply, a failing hook does not. The whole race on a real stack is in test_provider_stacks.py."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from livekit.agents import StopResponse
from livekit.agents.llm import ChatContext, ChatMessage
from resilient_agent.middleware.turn_keeper.turn_answer import answer_as_user_turn

from resilient_agent import ConversationState, MiddlewareContext


class _Speech:
    def __init__(self, *, allow_interruptions: bool, log: list[str]) -> None:
        self.allow_interruptions = allow_interruptions
        self._log = log

    def done(self) -> bool:
        return False

    def interrupt(self) -> None:
        self._log.append("interrupted")


class _Agent:
    """An app agent whose hook edits the message and the turn's context, or raises."""

    def __init__(self, log: list[str], raises: BaseException | None = None) -> None:
        self.chat_ctx = ChatContext.empty()
        self.chat_ctx.add_message(role="assistant", content="Hello, how can I help?")
        self._log = log
        self._raises = raises

    async def on_user_turn_completed(self, turn_ctx: ChatContext, new_message: ChatMessage) -> None:
        self._log.append(f"hook: {new_message.text_content}")
        if self._raises is not None:
            raise self._raises
        new_message.content = [f"{new_message.text_content} (edited)"]
        turn_ctx.add_message(role="system", content="The terrace is closed today.")


class _Session:
    def __init__(self, log: list[str], current: _Speech | None) -> None:
        self.current_speech = current
        self.replies: list[dict[str, Any]] = []
        self._log = log

    def generate_reply(self, **kwargs: Any) -> None:
        self._log.append("reply")
        self.replies.append(kwargs)


def _answer(
    *, raises: BaseException | None = None, protected: bool = False
) -> tuple[list[str], _Session, _Agent, ChatMessage | None]:
    log: list[str] = []
    session = _Session(log, _Speech(allow_interruptions=not protected, log=log))
    agent = _Agent(log, raises)
    ctx = MiddlewareContext(
        session=cast(Any, session), agent=cast(Any, agent), state=ConversationState(), emit=print
    )
    message = asyncio.run(answer_as_user_turn(ctx, "do you have a terrace", spoken=True))
    return log, session, agent, message


def test_the_hook_runs_first_and_the_reply_answers_its_message_in_its_context() -> None:
    log, session, agent, message = _answer()
    assert log == ["interrupted", "hook: do you have a terrace", "reply"]
    (reply,) = session.replies
    assert reply["user_input"] is message
    assert message is not None and message.text_content == "do you have a terrace (edited)"
    assert reply["input_modality"] == "audio"
    # the turn's context holds the hook's edit; the agent's own context does not
    said = [item.text_content for item in reply["chat_ctx"].items]
    assert said == ["Hello, how can I help?", "The terrace is closed today."]
    assert len(agent.chat_ctx.items) == 1


def test_stop_response_stops_the_reply() -> None:
    log, session, _, message = _answer(raises=StopResponse())
    assert message is None
    assert session.replies == []
    assert log == ["interrupted", "hook: do you have a terrace"]


@pytest.mark.parametrize("protected", [False, True])
def test_a_failing_hook_still_answers_and_a_protected_speech_is_not_interrupted(
    protected: bool,
) -> None:
    log, session, _, message = _answer(raises=ValueError("the app's bug"), protected=protected)
    assert message is not None and message.text_content == "do you have a terrace"
    assert len(session.replies) == 1
    assert ("interrupted" in log) is not protected
