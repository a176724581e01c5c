"""What a realtime model's report shows by what it lacks: a cut reply, a hung one, a barge-in.

A realtime model's server fails, hangs and hears the caller where livekit's report has no event
of its own for it. What the report has instead:

- **a reply cut by the server's error**: a recoverable ``realtime_model_error`` while the model's
  line played (Gemini Live's server closing with 1011: the plugin ends the reply's stream where
  the socket went, ends the turn, and reconnects). The line's message is the part that played;
  what the model meant to say after is nowhere. See :func:`cut_by_errors`;
- **a reply that never came**: a tool's output asked for one (livekit's ``reply_required``) and
  the agent thought from then to the close with nothing said and no error: the model's reply
  hung (:func:`hung_replies`). Asked for by livekit's ``EndCallTool``, whose hang-up waits for
  that reply's speech to end, it is a goodbye that never came (:func:`is_livekit_end_call`);
- **a reply asked for again after it hung**: livekit created a reply (``speech_created``) and
  nothing at all happened until the app asked for one again (a ``user_initiated``
  ``generate_reply``, as ``ResilientAgent``'s Watchdog does when a reply hangs): the first
  hung until then (:func:`asked_again`);
- **a line Gemini cut as the caller began**: Gemini's server stops its reply at the caller's
  first sound (its ``interrupted``) and transcribes them word by word after; a line interrupted
  in the instant the session closed, with no word of the caller's transcribed after it began,
  was cut by a caller who began a frame before (:func:`barge_ins`).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from livekit.agents.beta.tools import EndCallTool

from .faults import ProviderError
from .realtime import FRAME_S, RealtimeFlavour

__all__ = [
    "CUT_REST",
    "ModelLine",
    "ToolReply",
    "app_replies",
    "asked_again",
    "asked_again_assumption",
    "barge_in_assumption",
    "cut_length_assumption",
    "barge_ins",
    "cut_by_errors",
    "end_call_assumption",
    "hung_assumption",
    "hung_replies",
    "is_livekit_end_call",
    "whole_assumption",
    "whole_before_error",
]

CUT_REST = "and the rest its server's error cut."
"""What the replay's model means to say after the part of a reply that played before its server
cut it: the report has only that part."""

# events of one instant are stamped this close apart
_SAME_INSTANT_S = 1e-3
# the events that show something happened in a call (what the replay reads: see .emit)
_HAPPENINGS = frozenset(
    {
        "user_state_changed",
        "agent_state_changed",
        "user_input_transcribed",
        "conversation_item_added",
        "tool_execution_updated",
        "function_tools_executed",
        "speech_created",
        "error",
        "close",
    }
)


@dataclass(frozen=True)
class ModelLine:
    """A line the realtime model said, as the report tells it.

    Attributes:
        key: The message's id.
        text: What it said (the part that played, when it was cut).
        began: Call seconds when it began to play.
        added: When its message was added (it played out, or was cut).
        stopped: When the agent stopped saying it.
        interrupted: livekit marked it interrupted.
    """

    key: str
    text: str
    began: float
    added: float
    stopped: float
    interrupted: bool


@dataclass(frozen=True)
class ToolReply:
    """A tool's output as the model got it.

    Attributes:
        key: The call's id.
        name: The tool.
        output: What it returned.
        ended: Call seconds when its output went to the model.
        reply_required: It asked the model for a reply.
    """

    key: str
    name: str
    output: str
    ended: float
    reply_required: bool


def cut_by_errors(
    flavour: RealtimeFlavour,
    errors: Sequence[ProviderError],
    lines: Sequence[ModelLine],
    asked_again: Sequence[float] = (),
) -> tuple[list[ProviderError], dict[str, float], dict[str, float]]:
    """``errors`` with the model's line each one cut as its ``context``; each cut line's time.

    A recoverable error of the model while one of its lines played (not interrupted: the
    caller did not stop it) cut that line. Only Gemini Live's server is known to fail so
    mid-reply; another provider's error is left as it is (not replayed). But a line whose
    transcript ends a sentence, and that no reply the app asked for (``asked_again``: each
    ``user_initiated`` ``generate_reply``) followed as it ended, was whole: the server failed
    as it waited for the line's playout (:func:`whole_before_error`).

    Returns:
        The errors but those after a whole line, each cut line's ``key`` with its error's time,
        and each whole line's with its error's time.
    """
    read: list[ProviderError] = []
    cut: dict[str, float] = {}
    whole: dict[str, float] = {}
    for error in errors:
        line = next(
            (
                line
                for line in lines
                if line.began - _SAME_INSTANT_S <= error.at <= line.added + _SAME_INSTANT_S
                and not line.interrupted
                and line.key not in cut
            ),
            None,
        )
        if error.provider == "realtime" and error.recoverable and flavour == "gemini" and line:
            if whole_before_error(line, asked_again):
                whole[line.key] = error.at
                continue
            error = dataclasses.replace(error, context=line.text)
            cut[line.key] = error.at
        read.append(error)
    return read, cut, whole


def whole_before_error(line: ModelLine, asked_again: Sequence[float]) -> bool:
    """Whether ``line``, which its server's error came during, had come whole before it.

    Its transcript ends a sentence (Gemini's transcript of a cut reply ends where its audio
    did, mid-sentence as a rule) and no reply the app asked for followed in the instant it
    ended (``ResilientAgent`` asks again for a reply whose audio ran out at the error).
    """
    if not line.text.rstrip().endswith((".", "!", "?")):
        return False
    return not any(abs(at - line.added) <= _SAME_INSTANT_S for at in asked_again)


def whole_assumption(line: ModelLine, error_at: float) -> str:
    """The ``assumed:`` line of a whole reply whose server failed while it played."""
    return (
        f"at {error_at:.2f} s: the model's server failed (a recoverable realtime_model_error) "
        f"while its line {line.text!r} played, which ends a sentence, and no reply was asked "
        f"for again as it ended at {line.added:.2f} s: the reply had come whole and the server "
        "failed as it waited for its playout; the replay's model fails so then"
    )


def app_replies(events: Sequence[Any]) -> list[float]:
    """When the app asked for a reply (``speech_created``, ``user_initiated``), call seconds."""
    t0 = float(events[0]["created_at"]) if events else 0.0
    return [
        round(float(e["created_at"]) - t0, 3)
        for e in events
        if _is_reply(e) and e.get("user_initiated") is True
    ]


def cut_length_assumption(text: str, began: float, played: float) -> str:
    """The ``assumed:`` line of how long a line its server cut played."""
    return (
        f"at {began:.2f} s: the model's line {text!r}, cut by its server's error, played "
        f"{played:.2f} s (the agent spoke it from {began:.2f} to {began + played:.2f} s): the "
        "replay's model plays its words over as long, not at the lab voice's length for them"
    )


def hung_replies(
    replies: Sequence[ToolReply],
    lines: Sequence[ModelLine],
    agent_states: Sequence[tuple[float, str]],
    close_at: float | None,
    errors: Sequence[ProviderError],
) -> list[ToolReply]:
    """The tool outputs whose reply never came: the agent thought from them to the close.

    The reply was asked for (``reply_required``), the agent went ``thinking`` as the output went
    to the model and stayed so until the close (its state changed next in the close's instant,
    or never), nothing was said after it and no error came: the model's reply hung.
    """
    if close_at is None:
        return []
    hung: list[ToolReply] = []
    for reply in replies:
        if not reply.reply_required:
            continue
        after = [(at, state) for at, state in agent_states if at >= reply.ended - _SAME_INSTANT_S]
        thinking = next((i for i, (_, state) in enumerate(after) if state == "thinking"), None)
        if thinking is None or after[thinking][0] > reply.ended + _SAME_INSTANT_S:
            continue
        if any(at < close_at - _SAME_INSTANT_S for at, _ in after[thinking + 1 :]):
            continue  # the agent did something else before the close
        if any(line.began >= reply.ended - _SAME_INSTANT_S for line in lines):
            continue
        if any(reply.ended <= e.at <= close_at for e in errors):
            continue  # an error, not a hang
        hung.append(reply)
    return hung


def hung_assumption(reply: ToolReply, close_at: float) -> str:
    """The ``assumed:`` line of a reply that never came."""
    return (
        f"at {reply.ended:.2f} s: the model's reply to the output of {reply.name} never came "
        f"(the agent thought from then to the close at {close_at:.2f} s with nothing said and no "
        "error): it hung, and the replay's model hangs on it"
    )


def asked_again(events: Sequence[Any]) -> list[tuple[float, float]]:
    """The replies that hung until the app asked for one again: (first asked, asked again).

    livekit created a reply (``speech_created`` from ``generate_reply``, its own or the app's)
    and nothing happened after it (no event the replay reads: no line, no turn, no transcript,
    no tool, no error) until the app asked for a reply again (``speech_created``,
    ``user_initiated``): the model's first reply hung until then, and the one asked again is
    the one that came, if any. A reply asked with nothing created before it since the last
    event (an app's own greeting after a pause) is not one.

    Args:
        events: The report's events (checked by :func:`~.plan.load_plan`).
    """
    t0 = float(events[0]["created_at"]) if events else 0.0
    found: list[tuple[float, float]] = []
    last: tuple[float, Any] | None = None  # the event before, and when
    for event in events:
        if not isinstance(event, Mapping) or event.get("type") not in _HAPPENINGS:
            continue
        at = float(event["created_at"]) - t0
        if (
            last is not None
            and _is_reply(event)
            and event.get("user_initiated") is True
            and _is_reply(last[1])
            and at - last[0] > _SAME_INSTANT_S
        ):
            first = found[-1][0] if found and found[-1][1] == last[0] else last[0]
            found = [f for f in found if f[1] != last[0]]  # asked again twice: one hang
            found.append((round(first, 3), round(at, 3)))
        last = (at, event)
    return found


def _is_reply(event: Any) -> bool:
    return (
        isinstance(event, Mapping)
        and event.get("type") == "speech_created"
        and event.get("source") == "generate_reply"
    )


def asked_again_assumption(first: float, again: float) -> str:
    """The ``assumed:`` line of a reply that hung until the app asked for one again."""
    return (
        f"at {first:.2f} s: the reply livekit created (speech_created) never came: nothing "
        f"happened until {again:.2f} s, when the app asked for a reply again (a user_initiated "
        "generate_reply, as ResilientAgent's Watchdog does when a reply hangs): it hung, and the "
        f"replay's model hangs on that reply's context until {again:.2f} s"
    )


def is_livekit_end_call(name: str, output: str) -> bool:
    """Whether a tool named ``name`` that returned ``output`` is livekit's ``EndCallTool``.

    It is named ``end_call`` and returned its default ``end_instructions`` (the report does
    not name a tool's class: a tool of the app's own with that name and output reads the same).
    """
    default = inspect.signature(EndCallTool).parameters["end_instructions"].default
    return name == "end_call" and output == default


def end_call_assumption(reply: ToolReply) -> str:
    """The ``assumed:`` line of a goodbye livekit's ``EndCallTool`` asked for that never came."""
    return (
        f"at {reply.ended:.2f} s: the tool {reply.name} returned {reply.output!r}, livekit's "
        "EndCallTool's instructions: it was livekit's EndCallTool, which hangs up once the "
        "goodbye's speech is done (the report does not name a tool's class); the replay runs it"
    )


def barge_ins(
    flavour: RealtimeFlavour,
    lines: Sequence[ModelLine],
    worded_turn_starts: Sequence[float],
    close_at: float | None,
) -> list[tuple[float, ModelLine]]:
    """When a caller began to speak and Gemini cut its line for it, before the close; the line.

    The model's line was interrupted in the instant the session closed, and no turn of the
    caller's with words began after the line did: Gemini's server stopped it at the caller's
    first sound, a frame before, and the close came before any word of theirs was transcribed.
    """
    if flavour != "gemini" or close_at is None:
        return []
    found: list[tuple[float, ModelLine]] = []
    for line in lines:
        if not line.interrupted or abs(line.stopped - close_at) > _SAME_INSTANT_S:
            continue
        if any(start >= line.began - _SAME_INSTANT_S for start in worded_turn_starts):
            continue
        found.append((round(line.stopped - FRAME_S, 3), line))
    return found


def barge_in_assumption(at: float, line: str) -> str:
    """The ``assumed:`` line of a caller who began to speak as Gemini cut its line."""
    return (
        f"at {at:.2f} s: the caller began to speak and Gemini cut its line {line!r} as it heard "
        "them (the line was interrupted as the session closed, no word of theirs transcribed): "
        "the replayed caller begins a word then"
    )
