"""Which of a report's user messages an STT wrote, whatever order the chat-only ones take.

A user message the chat has and no event added (a middleware committed it) is put among the
others by its ``created_at``; the messages an STT wrote (with speech metrics) stay the ones the
events said, not whichever now sits at their place in the list.
"""

from __future__ import annotations

from typing import Any

from resilient_agent.lab.replay import load_plan

_T0 = 1_800_000_000.0


def _event(at: float, kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "created_at": _T0 + at, **fields}


def _message(key: str, at: float, text: str, *, spoken: bool) -> dict[str, Any]:
    metrics = {"started_speaking_at": _T0 + at} if spoken else {}
    return {
        "id": key,
        "type": "message",
        "role": "user",
        "content": [text],
        "interrupted": False,
        "created_at": _T0 + at,
        "metrics": metrics,
    }


def _report(*, chat_only_at: float | None) -> dict[str, Any]:
    spoken = _message("spoken", 2.0, "book a table", spoken=True)
    typed = _message("typed", 4.0, "is there parking", spoken=False)
    events = [
        _event(0.0, "agent_state_changed", old_state="initializing", new_state="listening"),
        # the caller types as the call begins: RoomIO's claim on the turn and a reply asked
        _event(1.5, "user_state_changed", old_state="listening", new_state="speaking"),
        _event(1.5, "user_state_changed", old_state="speaking", new_state="listening"),
        _event(1.5, "speech_created", source="generate_reply", user_initiated=True),
        # then speaks; the typed message reaches the chat later (the agent held it)
        _event(2.0, "user_state_changed", old_state="listening", new_state="speaking"),
        _event(3.0, "user_state_changed", old_state="speaking", new_state="listening"),
        _event(3.0, "user_input_transcribed", transcript="book a table", is_final=True),
        _event(3.0, "conversation_item_added", item=spoken),
        _event(4.0, "conversation_item_added", item=typed),
        _event(10.0, "close", reason="user_initiated"),
    ]
    items = [spoken, typed]
    if chat_only_at is not None:
        # a message a middleware committed with no event, created before the others
        items.append(_message("chat_only", chat_only_at, "hello there", spoken=False))
    return {
        "sdk_version": "1.8.9",
        "options": {},
        "events": events,
        "chat_history": {"items": items},
    }


def test_the_typed_message_is_the_one_no_stt_wrote() -> None:
    plan = load_plan(_report(chat_only_at=None))
    assert [(m.at, m.text) for m in plan.typed] == [(1.5, "is there parking")]


def test_a_chat_only_message_sorted_first_leaves_the_spoken_one_spoken() -> None:
    plan = load_plan(_report(chat_only_at=0.5))
    # the spoken message (2.0 s) is still the STT's: the typed one is the message at 4.0 s
    assert [(m.at, m.text) for m in plan.typed] == [(1.5, "is there parking")]
