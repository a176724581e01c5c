"""The caller's typed chat messages in a livekit session report.

livekit records no event of its own for a chat message: RoomIO's default text input
(``TextInputOptions().text_input_cb``) claims the caller's turn (``user_state_changed`` to
``speaking``), interrupts the agent, asks for a reply with the text as the user message
(``speech_created`` with source ``generate_reply``) and releases the turn (``user_state_changed``
back to ``listening``), all in the same instant. So a typed message leaves:

* a caller "turn" no VAD could report: no transcript, over in the instant it began (a VAD's
  speech lasts tens of milliseconds at least), or ended by a reply asked for that instant;
* or, typed while the caller spoke, a reply asked for inside their turn with a user message
  that no STT wrote (no speech metrics) committed in the same instant, or their turn ending
  with a reply asked for in that instant;
* the message itself, in the chat, with no speech metrics: in that instant, or later when the
  agent held it (``ResilientAgent`` answers a message typed over protected speech after it);
  none when livekit refused the interrupt (a protected line played) and the message was lost.
  ``ResilientAgent`` may commit a held message together with the caller's withheld words in
  one user message: its ``extra`` then names the typed words (``TYPED_EXTRA``), and only those
  are the typed message's; the rest are the caller's.

The replay types each message again at its time through the same text input
(:class:`~resilient_agent.testing.Typed`), its recorded text, or a placeholder word when it
was lost (its words are not in the report).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "UNPLAYED_REPLY",
    "TypedMessage",
    "TypedReading",
    "placeholder",
    "read_typed",
    "typed_replies",
    "untyped_words",
    "without_typed",
]

UNPLAYED_REPLY = "An answer the agent cut before it played."
"""The replay's answer to a message typed and answered at once whose answer never played.

livekit asked the LLM as the message was typed; the answer waited behind a protected line
and was cut (the caller spoke): the report has no trace of its text.
"""

# RoomIO's text input claims and releases the turn in one instant; a report rounds its times
_SAME_INSTANT_S = 1e-3
# a claim that waited for the agent's interrupted line to stop still ends well before a VAD
# would end any speech (its end of speech waits 0.55 s of silence)
_CLAIM_MAX_S = 0.2


@dataclass(frozen=True)
class TypedMessage:
    """A chat message the caller typed.

    Attributes:
        at: Call seconds when it arrived.
        text: Its text as the chat has it (of a message merged with spoken words, the typed
            words its ``extra`` names); None when it never reached the chat (livekit refused
            to interrupt a protected line, and the message was lost).
        answered_at_once: The reply to it was asked for as it was typed, with it in the
            chat: the LLM was asked then, whenever the reply played.
    """

    at: float
    text: str | None
    answered_at_once: bool = False


@dataclass(frozen=True)
class TypedReading:
    """What :func:`read_typed` found in a report's turns and messages.

    Attributes:
        messages: The typed messages, in order.
        claims: Indices of the raw turns that were a typed message's claim, not speech.
        user_messages: Indices of the user messages that were typed.
    """

    messages: tuple[TypedMessage, ...]
    claims: frozenset[int]
    user_messages: frozenset[int]


def placeholder(number: int) -> str:
    """The stand-in word of typed message ``number`` (from 1) that never reached the chat."""
    return f"untyped{number}"


def read_typed(
    turns: Sequence[Sequence[Any]],
    replies_asked: Sequence[float],
    user_messages: Sequence[tuple[float, str]],
    spoken: frozenset[int],
    typed_parts: Mapping[int, Sequence[str]] | None = None,
) -> TypedReading:
    """The typed messages of a report.

    Args:
        turns: The raw caller turns: ``[start, end or None, transcribed words, ...]``.
        replies_asked: Seconds of each ``speech_created`` with source ``generate_reply``.
        user_messages: Each user message: (seconds it was created, its text).
        spoken: Indices of the user messages an STT wrote (with speech metrics).
        typed_parts: Indices of the user messages that merge typed and spoken words, with
            the typed texts their ``extra`` names (``TYPED_EXTRA``), in order.
    """
    parts = typed_parts or {}
    found: list[tuple[float, int | None]] = []  # (when, the claim's turn index)
    # messages of words the STT transcribed: livekit's own commits (its user_turn_limit cuts
    # a turn with a message of its words so far and a reply asked for in that instant)
    every_heard = {word for turn in turns for word in turn[2]}
    transcribed = {
        i for i, (_, text) in enumerate(user_messages) if set(text.split()) <= every_heard
    }
    for index, turn in enumerate(turns):
        start, end, heard = turn[0], turn[1], turn[2]
        asked = [a for a in replies_asked if start - _SAME_INSTANT_S <= a]
        if end is not None:
            asked = [a for a in asked if a <= end + _SAME_INSTANT_S]
        ended_by_reply = end is not None and any(abs(a - end) <= _SAME_INSTANT_S for a in asked)
        if not heard and end is not None and end - start <= _SAME_INSTANT_S:
            found.append((start, index))  # a claim: lost, or answered at once
        elif not heard and ended_by_reply and end - start <= _CLAIM_MAX_S:
            found.append((start, index))  # a claim that waited for an interrupted line
        elif ended_by_reply:
            found.append((end, None))  # typed while they spoke: the release ended the turn
        else:
            found.extend(
                (a, None)
                for a in asked
                if a > start + _SAME_INSTANT_S
                and any(
                    abs(t - a) <= _SAME_INSTANT_S and i not in spoken and i not in transcribed
                    for i, (t, _) in enumerate(user_messages)
                )
            )
    found.sort(key=lambda f: f[0])
    used: Counter[int] = Counter()
    messages: list[TypedMessage] = []
    for at, claim in found:
        text = _message(at, claim is not None, replies_asked, user_messages, spoken, used, parts)
        at_once = text is not None and any(
            abs(user_messages[i][0] - at) <= _SAME_INSTANT_S and user_messages[i][1] == text
            for i in used
        )
        messages.append(TypedMessage(round(at, 3), text, at_once))
    return TypedReading(
        tuple(messages),
        frozenset(i for _, i in found if i is not None),
        frozenset(used),
    )


def _message(
    at: float,
    claimed: bool,
    replies_asked: Sequence[float],
    user_messages: Sequence[tuple[float, str]],
    spoken: frozenset[int],
    used: Counter[int],
    parts: Mapping[int, Sequence[str]],
) -> str | None:
    """The text of the message typed at ``at``, counting its user message in ``used``.

    A message livekit refused (no reply asked for as it was typed) never reached the chat.
    Otherwise its user message is the first one no STT wrote from then on (or one whose
    ``extra`` names typed words): in that instant, or later when the agent held it. A message
    that names typed words holds that many typed messages, the first of them first.
    """
    if claimed and not any(abs(a - at) <= _CLAIM_MAX_S for a in replies_asked if a >= at - 1e-3):
        return None
    # the one in that instant closest to it (a middleware may commit another beside it),
    # else the first after it
    free = [
        (abs(created - at) > _SAME_INSTANT_S, abs(created - at), index)
        for index, (created, _) in enumerate(user_messages)
        if used[index] < max(1, len(parts.get(index, ())))
        and (index not in spoken or index in parts)
        and created >= at - _SAME_INSTANT_S
    ]
    if not free:
        return None
    *_, index = min(free)
    taken = used[index]
    used[index] += 1
    return parts[index][taken] if index in parts else user_messages[index][1]


def typed_replies(
    answers: Sequence[tuple[float, bool, str | None]], messages: Sequence[TypedMessage]
) -> dict[int, str]:
    """Which recorded LLM answers replied to a typed message: answer index to its text.

    livekit asks the LLM as soon as a reply is asked for, with the message last in its
    context, and plays the answer when the speeches before it are over (a protected line):
    the answer that played first after a message answered at once was its reply, however
    much the chat gained in between (a tool's output), unless a later user message was
    committed before it began (the reply was cut, and that message answered).

    Args:
        answers: Each LLM answer in order: (seconds it began, whether it answered an
            agent's entry, the user message that ends its context by the times, if one does).
        messages: The typed messages.
    """
    replies: dict[int, str] = {}
    for message in messages:
        if not message.answered_at_once or message.text is None:
            continue
        index = next(
            (
                i
                for i, (at, entry, _) in enumerate(answers)
                if at >= message.at - _SAME_INSTANT_S and not entry and i not in replies
            ),
            None,
        )
        if index is not None and answers[index][2] in (None, message.text):
            replies[index] = message.text
    return replies


def untyped_words(text: str, typed: Sequence[str]) -> list[str]:
    """The words of a user message less its typed texts (each the first run of its words)."""
    words = text.split()
    for part in typed:
        run = part.split()
        at = next(
            (i for i in range(len(words) - len(run) + 1) if words[i : i + len(run)] == run), None
        )
        if run and at is not None:
            del words[at : at + len(run)]
    return words


def without_typed(words: Sequence[str], messages: Sequence[TypedMessage]) -> list[str]:
    """``words`` of a user message without a typed message's words it begins with.

    An agent that held a typed message (``ResilientAgent``, over protected speech) commits it
    with the caller's next turn, the typed words first.
    """
    for message in messages:
        typed = message.text.split() if message.text is not None else []
        if typed and list(words[: len(typed)]) == typed:
            return list(words[len(typed) :])
    return list(words)
