"""A realtime model's call (OpenAI Realtime, Gemini Live) as its report tells it.

On a realtime model there is no STT, LLM or TTS node: the model hears the caller's audio, its
server detects the turns and it speaks its own answers. livekit's report still carries the call:
``user_state_changed`` from the server's speech events, ``user_input_transcribed`` from the
model's input transcription (Gemini's interim ones as each word is heard), the assistant
messages with their ``provider_request_ids`` (and no ``llm_metadata``: no LLM node made them),
the tool calls, and the recording's caller channel. What it cannot carry is the server's own
VAD: how long a silence ended a turn (:data:`SERVER_SILENCE_S` assumed) and where a word was
heard in the audio.

This module reads what differs from a pipeline call: which provider (:func:`realtime_flavour`),
which messages the model spoke (:func:`is_model_message`), when each answer was asked for
(:func:`request_before`), and where the caller's words were in the audio the model heard
(:func:`speech_window`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "FRAME_S",
    "SERVER_SILENCE_S",
    "RealtimeFlavour",
    "is_model_message",
    "last_word_heard",
    "realtime_flavour",
    "request_before",
    "silence_assumption",
    "speech_window",
]

RealtimeFlavour = Literal["openai", "gemini"]
"""The provider whose model ran the call."""

SERVER_SILENCE_S = 0.5
"""Seconds of silence after which the model's server ended a turn (assumed: OpenAI's
``server_vad`` default ``silence_duration_ms=500``; the report has no VAD setting of the model)."""

FRAME_S = 0.01
"""An audio frame: the server hears a frame once it has arrived whole."""

# Gemini Live's response and input ids (livekit-plugins-google's ``utils.shortuuid("GR_")``,
# ``"GI_"``); OpenAI's are the server's ``resp_...`` and ``item_...``
_GEMINI_IDS = ("GR_", "GI_")
_GEMINI_PROVIDERS = ("google", "gemini", "vertex")
# a word's length where the report has no pace of the caller's words (2.5 a second)
_WORD_S = 0.4
# metrics only a pipeline's LLM and TTS nodes add to an assistant message
_PIPELINE_METRICS = ("llm_metadata", "llm_node_ttft", "tts_metadata", "tts_node_ttfb")


def is_model_message(metrics: Any) -> bool:
    """Whether an assistant message's ``metrics`` are a realtime model's reply.

    livekit gives a realtime generation's message the response's id and no LLM or TTS node
    metrics; a pipeline's reply has ``llm_metadata``, a ``say()`` line ``tts_metadata``.
    """
    if not isinstance(metrics, Mapping) or not metrics.get("provider_request_ids"):
        return False
    return not any(key in metrics for key in _PIPELINE_METRICS)


def realtime_flavour(report: Mapping[str, Any]) -> RealtimeFlavour | None:
    """The realtime provider that ran the call, None for a pipeline call.

    A report whose assistant messages the model spoke, or whose caller's transcripts name the
    model's conversation item (a pipeline's STT names none), is a realtime call; the usage
    summary names the provider when the report has it, else the ids do (Gemini's ``GR_`` and
    ``GI_``).
    """
    ids = _transcript_items(report.get("events"))
    history = report.get("chat_history")
    items = history.get("items") if isinstance(history, Mapping) else None
    for item in items if isinstance(items, list) else ():
        if isinstance(item, Mapping) and item.get("role") == "assistant":
            metrics = item.get("metrics")
            if is_model_message(metrics):
                assert isinstance(metrics, Mapping)
                ids += [str(i) for i in metrics["provider_request_ids"]]
    if not ids:
        return None
    provider = _usage_provider(report.get("usage"))
    if provider is not None:
        return "gemini" if any(p in provider for p in _GEMINI_PROVIDERS) else "openai"
    return "gemini" if any(i.startswith(_GEMINI_IDS) for i in ids) else "openai"


def _transcript_items(events: Any) -> list[str]:
    """The conversation item ids the caller's transcripts name (a realtime model's)."""
    found: list[str] = []
    for event in events if isinstance(events, list) else ():
        if isinstance(event, Mapping) and event.get("type") == "user_input_transcribed":
            item = event.get("item_id")
            if isinstance(item, str) and item:
                found.append(item)
    return found


def _usage_provider(usage: Any) -> str | None:
    """The realtime model's provider in the report's usage summary, if it names one."""
    summaries = usage if isinstance(usage, list) else []
    for summary in summaries:
        if not isinstance(summary, Mapping):
            continue
        kind = str(summary.get("type", ""))
        provider = summary.get("provider")
        if "realtime" in kind.lower() and isinstance(provider, str):
            return provider.lower()
    return None


def last_word_heard(word_times: Sequence[tuple[float, int]]) -> float:
    """When a turn's transcript first had all its words: (seconds, words so far) of each."""
    most = max(count for _, count in word_times)
    return min(at for at, count in word_times if count == most)


def request_before(started: float, requests: Sequence[float]) -> float:
    """When the answer that began to play at ``started`` was asked for: the last request by then.

    A realtime answer is asked for by the server's end of a caller's turn, a tool output sent
    to the model, an agent's entry or the app's ``generate_reply``.
    """
    before = [at for at in requests if at <= started + 1e-3]
    return max(before, default=0.0)


def speech_window(
    flavour: RealtimeFlavour,
    start: float,
    end: float,
    words: int,
    word_times: Sequence[tuple[float, int]],
    ended: bool,
) -> tuple[float, float]:
    """Where a turn's words were in the audio the model heard, from the report's times.

    OpenAI's server reports speech from the first frame that carried it, once that frame
    arrived, and its end after :data:`SERVER_SILENCE_S` of silence. Gemini's reports speech with
    its first transcribed word and ends the turn with its answer; its interim transcripts come
    as each word is heard (halfway through it): the words span the first interim less half a
    word to the last interim plus half a word.

    Args:
        flavour: The provider.
        start: The turn's start (``user_state_changed`` to speaking).
        end: Its end (to listening), or its last words when it never ended.
        words: How many words it has.
        word_times: Each transcript of its words: (seconds, how many words so far).
        ended: The server ended it.
    """
    said_from, said_to = _window(flavour, start, end, words, word_times, ended)
    # audio sent to the model at once (held, then let go) leaves no time between its words
    return said_from, max(said_to, round(said_from + FRAME_S, 3))


def _window(
    flavour: RealtimeFlavour,
    start: float,
    end: float,
    words: int,
    word_times: Sequence[tuple[float, int]],
    ended: bool,
) -> tuple[float, float]:
    if flavour == "openai":
        said_from = start - FRAME_S
        return round(said_from, 3), round(end - SERVER_SILENCE_S if ended else end, 3)
    interims = sorted({(at, count) for at, count in word_times if 0 < count <= words})
    firsts: dict[int, float] = {}
    for at, count in interims:
        firsts.setdefault(count, at)
    if len(firsts) >= 2:
        (first_count, first_at), (last_count, last_at) = min(firsts.items()), max(firsts.items())
        word = (last_at - first_at) / (last_count - first_count)
        begin = first_at - word * (first_count - 0.5)
        return round(max(begin, 0.0), 3), round(last_at + word / 2, 3)
    # one word, or no interim: the turn's start is its first word heard, the words at a pace
    begin = max(start - _WORD_S / 2, 0.0)
    return round(begin, 3), round(begin + max(words, 1) * _WORD_S, 3)


def silence_assumption(flavour: RealtimeFlavour) -> str:
    """The ``assumed:`` line of what the report cannot carry of a realtime model's hearing."""
    name = "OpenAI Realtime" if flavour == "openai" else "Gemini Live"
    return (
        f"a realtime model ({name}, from the report's responses) heard the caller: its server "
        f"ended a turn after {SERVER_SILENCE_S:g} s of silence and heard a word once half of it "
        "had arrived (the report has no VAD setting of the model); the lab's scripted model "
        "answers with the recorded messages and tool calls"
    )
