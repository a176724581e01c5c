"""What a pipeline call's report shows by what it lacks: a hung LLM, a lost playout, a silent STT.

livekit reports a provider's failure as an ``error`` event only when the provider raised. An
LLM that accepted a request and never sent a token, an audio sink that never reported the
playout of a line it cleared, and an STT that took the audio and answered nothing raise
nothing; the agent recovered from them (``ResilientAgent``'s Watchdog asked again, gave the
playout up, restarted the STT) and the report shows what that left:

- **an LLM request that never produced a token** (it hung, or kept its stream alive with empty
  chunks: the report cannot tell them apart): a reply was asked for (``speech_created``) and
  the agent went ``thinking``, then nothing: no line, no error, no caller, no state change, no
  new message or tool output, until a reply was asked for again, whose answer was said
  (:func:`hung_requests`);
- **a playout report that never came**: a line the caller interrupted whose message livekit
  added long after the caller's message was committed, in the same instant the reply to it was
  asked for: livekit waited for the cleared line's playout report that long
  (:func:`lost_playouts`);
- **an STT that went silent**: a turn of the caller's with no transcript event, whose words a
  middleware committed later (a user message with no speech metrics), while the agent only
  listened (it withheld no audio from the STT) (:func:`silent_stt_from`).

Each is timed for the replay's faults and printed as an ``assumed:`` line. And what the report
does record, a refusal, times the answer after it: livekit's ``llm_node_ttft`` counts from the
refused request, the retry comes after its ``error`` (:func:`retry_after_refusals`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from livekit.agents import DEFAULT_API_CONNECT_OPTIONS

from .faults import ProviderError

__all__ = [
    "HungRequest",
    "LostPlayout",
    "hung_request_assumption",
    "hung_requests",
    "lost_playout_assumption",
    "lost_playouts",
    "retry_after_refusals",
    "silent_stt_assumption",
    "silent_stt_from",
]

# events of one instant are stamped this close apart
_SAME_INSTANT_S = 1e-3
# livekit retries an LLM request 0.1 s after its first error, then after the connection
# options' retry_interval (APIConnectOptions._interval_for_retry)
_FIRST_RETRY_S = 0.1
# a cleared line's playout is reported at once: a reply that waited this long for it did not get it
_LATE_PLAYOUT_S = 0.5
# a hung request's rule hangs the requests made this long before the one asked again
_FRAME_S = 0.01


@dataclass(frozen=True)
class HungRequest:
    """An LLM request that never produced a token, and the one asked again after it.

    Attributes:
        asked: Call seconds when the first request that never produced a token was made.
        again: When the agent asked again and was answered (the answer said).
    """

    asked: float
    again: float

    @property
    def until(self) -> float:
        """The replay's requests for the same context hang when made before this."""
        return round(self.again - _FRAME_S, 3)


@dataclass(frozen=True)
class LostPlayout:
    """A line the caller interrupted whose playout report never came.

    Attributes:
        text: The line.
        cleared: Call seconds when livekit cleared it (the caller's message was committed).
        given_up: When its message was added at last and the reply asked for.
    """

    text: str
    cleared: float
    given_up: float


def hung_requests(
    replies: Sequence[float],
    answered: Sequence[float],
    agent_states: Sequence[tuple[float, str]],
    quiet_breakers: Sequence[float],
) -> list[HungRequest]:
    """The reply requests that never produced a token, each with the request answered after it.

    Args:
        replies: When a reply was asked for (``speech_created``, ``generate_reply``).
        answered: When each LLM line said was asked for (its message's ``created_at``).
        agent_states: The agent's states, (seconds, state).
        quiet_breakers: When anything else happened that could end or explain a wait: the
            caller's state changes, user messages and tool outputs added, handoffs, errors.
    """
    hung: list[HungRequest] = []
    first: float | None = None
    for asked, again in itertools.pairwise(replies):
        if _near(asked, answered) or not _thought_through(asked, again, agent_states):
            first = None
            continue
        if any(asked + _SAME_INSTANT_S < at <= again + _SAME_INSTANT_S for at in quiet_breakers):
            first = None
            continue
        first = asked if first is None else first
        if _near(again, answered):
            hung.append(HungRequest(round(first, 3), round(again, 3)))
            first = None
    return hung


def hung_request_assumption(request: HungRequest, context: str) -> str:
    """The ``assumed:`` line of an LLM request that never produced a token."""
    return (
        f"at {request.asked:.2f} s: the LLM's request answering {context} produced no token "
        f"(the agent thought from then with no answer, no error, nothing from the caller, until "
        f"it asked again at {request.again:.2f} s and that answer was said): the LLM hung, or "
        "kept its stream alive without a token (the report cannot tell); the replay's requests "
        f"answering it before {request.until:.2f} s hang"
    )


def lost_playouts(
    interrupted: Sequence[tuple[str, float, float]],
    committed: Sequence[float],
    replies: Sequence[float],
) -> list[LostPlayout]:
    """The interrupted lines whose playout report never came.

    Args:
        interrupted: Each line the caller interrupted: (its text, when it began, when its
            message was added).
        committed: When each user message was committed (its ``created_at``).
        replies: When a reply was asked for (``speech_created``, any source).
    """
    found: list[LostPlayout] = []
    for text, began, added in interrupted:
        cleared = [c for c in committed if began < c < added - _LATE_PLAYOUT_S]
        if not cleared or not _near(added, replies):
            continue
        # livekit asked for no reply from the commit to the message: it waited for the line
        if any(cleared[-1] - _SAME_INSTANT_S <= r < added - _SAME_INSTANT_S for r in replies):
            continue
        found.append(LostPlayout(text, round(cleared[-1], 3), round(added, 3)))
    return found


def lost_playout_assumption(lost: LostPlayout) -> str:
    """The ``assumed:`` line of a playout report that never came."""
    return (
        f"at {lost.cleared:.2f} s: the playout report of the line {_short(lost.text)!r}, cleared "
        "as the caller's message was committed then, never came: livekit added its message and "
        f"asked for the reply only at {lost.given_up:.2f} s; the replay's audio output never "
        "reports a cleared line's playout"
    )


def silent_stt_from(
    turns: Sequence[tuple[float, float, bool, bool]],
    agent_states: Sequence[tuple[float, str]],
) -> float | None:
    """When the STT went silent while the agent only listened, its words recovered later.

    Args:
        turns: Each caller turn: (start, end, any transcript event had words of it, it has
            words all the same: a middleware committed them as a user message).
        agent_states: The agent's states, (seconds, state).

    Returns:
        The start of the first turn with no transcript whose words were committed all the
        same, the agent ``listening`` through it (no protected speech withheld its audio);
        None when there is none.
    """
    for start, end, transcribed, has_words in turns:
        if transcribed or not has_words:
            continue
        before = [state for at, state in agent_states if at <= start + _SAME_INSTANT_S]
        during = [state for at, state in agent_states if start + _SAME_INSTANT_S < at <= end]
        if before and before[-1] == "listening" and not during:
            return round(start, 3)
    return None


def silent_stt_assumption(at: float) -> str:
    """The ``assumed:`` line of an STT that went silent and was restarted."""
    return (
        f"at {at:.2f} s: no transcript of the caller's turn, the agent listening, and its words "
        "committed later with no speech metrics (a middleware recovered them): the STT took "
        "the audio and answered nothing from then; the replay's STT stream does, once (a new "
        "stream works)"
    )


def retry_after_refusals(asked: float, ttft: float, errors: Sequence[ProviderError]) -> float:
    """Seconds from a request to livekit's retry whose answer came; 0 when it was not refused.

    livekit's ``llm_node_ttft`` counts from the request; each refusal of it (a recoverable
    ``llm_error`` before its first token) is retried after livekit's retry interval (0.1 s
    after the first, the connection options' ``retry_interval`` after a later one).
    """
    refusals = [
        e
        for e in errors
        if e.provider == "llm"
        and e.recoverable
        and asked - _SAME_INSTANT_S <= e.at <= asked + ttft + _SAME_INSTANT_S
    ]
    if not refusals:
        return 0.0
    interval = _FIRST_RETRY_S if len(refusals) == 1 else DEFAULT_API_CONNECT_OPTIONS.retry_interval
    retried = refusals[-1].at + interval
    return round(retried - asked, 3) if retried < asked + ttft else 0.0


def _near(at: float, times: Sequence[float]) -> bool:
    return any(abs(at - t) <= _SAME_INSTANT_S for t in times)


def _thought_through(asked: float, again: float, agent_states: Sequence[tuple[float, str]]) -> bool:
    """The agent was ``thinking`` when ``asked`` was asked for, and stayed so until ``again``."""
    by = [state for at, state in agent_states if at <= asked + _SAME_INSTANT_S]
    if not by or by[-1] != "thinking":
        return False
    after, until = asked + _SAME_INSTANT_S, again + _SAME_INSTANT_S
    return not any(after < at <= until for at, _ in agent_states)


def _short(text: str, words: int = 6) -> str:
    split = text.split()
    return text if len(split) <= words else " ".join(split[:words]) + " ..."
