"""Recognizing the caller's audio with the app's STT as the STT itself allows.

The library re-transcribes audio livekit withheld from the STT and opens listening streams while
a protected speech plays, with the session's own STT. A non-streaming STT (``openai.STT()``'s
default, Groq, any STT that livekit itself wraps in ``stt.StreamAdapter`` with the VAD) says so
in ``capabilities.streaming``; its ``stream()`` raises ``NotImplementedError`` or, on some
plugins, opens a different product (OpenAI's realtime transcription socket). Such an STT
streams only through a ``StreamAdapter`` that the VAD cuts into utterances, as livekit's
``stt_node`` does; audio that is all there is goes to ``recognize()`` in one request.
"""

from __future__ import annotations

from typing import Any

from livekit import rtc
from livekit.agents import stt, vad

__all__ = ["recognition_stream", "recognize_frames"]


async def recognize_frames(recognizer: stt.STT[Any], frames: list[rtc.AudioFrame]) -> str | None:
    """The transcript of ``frames`` by one ``recognize()`` request, or None to stream them.

    Audio that is all there is recognized in one request whenever the STT offers it
    (``capabilities.offline_recognize``): a non-streaming STT has nothing else, and a streaming
    one is spared a second socket (Deepgram's live stream also ends only at its next KeepAlive
    tick, up to 5 s after the last result). None tells the caller to stream instead: a
    streaming STT without offline recognition, or one whose ``recognize()`` is not implemented
    after all.
    """
    capabilities = recognizer.capabilities
    if capabilities.streaming and not capabilities.offline_recognize:
        return None
    if not frames:
        return ""
    try:
        event = await recognizer.recognize(frames)
    except NotImplementedError:
        if capabilities.streaming:
            return None
        raise
    texts = [a.text.strip() for a in event.alternatives[:1] if a.text.strip()]
    return " ".join(texts)


def recognition_stream(recognizer: stt.STT[Any], detector: vad.VAD | None) -> stt.RecognizeStream:
    """A stream of ``recognizer``: its own, or a ``StreamAdapter`` over ``detector``.

    Raises:
        NotImplementedError: ``recognizer`` does not stream and there is no VAD to cut its
            audio into utterances.
    """
    if recognizer.capabilities.streaming:
        return recognizer.stream()
    if detector is None:
        raise NotImplementedError(
            f"{type(recognizer).__name__} does not stream and the session has no VAD to cut the "
            "caller's audio into utterances for it"
        )
    return stt.StreamAdapter(stt=recognizer, vad=detector).stream()
