"""Whether the caller is still saying words, by the session's own STT.

A VAD reports speech for any loud sound (a TV, a fan, a stuck model); words are what a caller
who keeps talking proves themselves with. :class:`CallerWords` remembers when the STT last heard
new words: from the session's transcripts (:meth:`CallerWords.heard`), and, while livekit feeds
the STT silence because a protected speech is current, from a *listening stream* of the same
STT fed with the caller's audio (:meth:`CallerWords.listen`), opened only for as long as a
reader needs the evidence. A stream that fails costs the evidence, never the call: the reader
then behaves as without it.

A non-streaming STT hears an utterance only at the VAD's end of speech, so while the caller
talks on it reports nothing. For it a reader asks instead (:meth:`CallerWords.look`): one
``recognize()`` request over the caller's audio since the last look (at most
:data:`WORDS_RECENT_S` of it), whose words are new words said then.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any

from livekit import rtc
from livekit.agents import Agent, AgentSession, stt, utils, vad

from resilient_agent import MiddlewareContext, get_logger

from .recognition import recognition_stream, recognize_frames
from .session_facts import session_recognizer, stt_is_withheld

__all__ = ["WORDS_RECENT_S", "CallerWords"]

WORDS_RECENT_S = 1.5
"""New words heard this recently mean the caller is still saying them. A streaming STT reports
new words about once per word (0.3 to 0.5 s), or about once a second; across a pause just short
of the VAD's end of speech (0.55 s) the next report comes up to about 1.1 s after the last."""

logger = get_logger("middleware.caller_words")


class CallerWords:
    """When the STT last heard the caller say new words (loop time).

    The caller's audio reaches :meth:`on_frame` through the session's one audio observer
    (:meth:`observe`); frames reach the listening stream only while one is open.
    """

    def __init__(self) -> None:
        self.last_words_at = float("-inf")
        self._last_text = ""
        # the VAD that cuts the caller's audio for a non-streaming STT (the session's)
        self.detector: vad.VAD | None = None
        self._stream: stt.RecognizeStream | None = None
        self._task: asyncio.Task[None] | None = None
        # streams stopped and still closing (awaited by aclose); made at the first stop
        self._closing: set[asyncio.Task[None]] | None = None
        self._told_failure = False
        # the agent's context whose observer shows us frames, while a stream may need them
        self._observed: MiddlewareContext | None = None
        # a non-streaming STT, asked by look(): the caller's audio since the last look
        self._asked: stt.STT[Any] | None = None
        self._unheard: deque[tuple[float, rtc.AudioFrame]] = deque()

    def observe(self, ctx: MiddlewareContext) -> bool:
        """Get the caller's audio from the agent's observer; False without audio input.

        Registered only while a stream may need it (:meth:`stop` unregisters it): a call pays
        nothing per frame outside a long hold.
        """
        if self._observed is None and ctx.observe_audio(self.on_frame):
            self._observed = ctx
        return self._observed is not None

    def listen_if_withheld(
        self, session: AgentSession[Any], agent: Agent, source: Callable[[], bool]
    ) -> None:
        """Open the listening stream while livekit feeds the STT silence, if not open yet.

        Otherwise the session's own transcripts tell (:meth:`heard`). ``source`` connects the
        caller's audio (:meth:`observe`).
        """
        if self.listening or not stt_is_withheld(session):
            return
        recognizer = session_recognizer(agent, session)
        if recognizer is not None and source():
            agent_vad = agent.vad
            detector = agent_vad if utils.is_given(agent_vad) else session.vad
            self.detector = detector if isinstance(detector, vad.VAD) else None
            self.listen(recognizer)

    def forget(self) -> None:
        """Forget the words heard so far (a new wait begins)."""
        self.last_words_at = float("-inf")
        self._last_text = ""

    def saying_words(self, now: float) -> bool:
        """Whether new words were heard within :data:`WORDS_RECENT_S` of ``now``."""
        return now - self.last_words_at <= WORDS_RECENT_S

    def heard(self, text: str, now: float) -> None:
        """A transcript arrived: new words if its text differs from the last one.

        An interim repeated unchanged (some STTs resend it while they hear nothing new) is no
        evidence; a final that only confirms the last interim is none either.
        """
        text = text.strip()
        if not text or text == self._last_text:
            return
        self._last_text = text
        self.last_words_at = now

    @property
    def listening(self) -> bool:
        """Whether a listening stream is open."""
        return self._task is not None and not self._task.done()

    @property
    def can_look(self) -> bool:
        """Whether the listening STT does not stream, and so is asked by :meth:`look`."""
        return self._asked is not None

    async def look(self) -> None:
        """Ask a non-streaming STT for the words in the caller's audio since the last look.

        One ``recognize()`` request over that audio (the last :data:`WORDS_RECENT_S` of it at
        most): its words are new words, heard when the answer comes, as a streaming STT's
        interim is. A failed request costs the evidence only.
        """
        recognizer, frames = self._asked, self._unheard
        if recognizer is None or not frames:
            return
        # on_frame keeps only the last WORDS_RECENT_S of it
        audio = [frame for _, frame in frames]
        frames.clear()
        try:
            text = await recognize_frames(recognizer, audio)
        except Exception as exc:
            self._failed("look_failed", exc)
            self._asked = None
            return
        if text:
            self._last_text = text
            self.last_words_at = asyncio.get_running_loop().time()

    def listen(self, recognizer: stt.STT[Any]) -> None:
        """Open a listening stream of ``recognizer`` (the session's STT) until :meth:`stop`.

        A non-streaming STT listens through a ``StreamAdapter`` over :attr:`detector` (the
        session's VAD), as livekit's own ``stt_node`` does (:mod:`.recognition`), and keeps
        the caller's audio for :meth:`look` when it offers ``recognize()``.
        """
        if self.listening:
            return
        capabilities = recognizer.capabilities
        if not capabilities.streaming and capabilities.offline_recognize:
            self._asked = recognizer
        try:
            stream = recognition_stream(recognizer, self.detector)
        except Exception as exc:
            self._failed("stream_not_opened", exc)
            return
        self._stream = stream
        self._task = asyncio.get_running_loop().create_task(
            self._read(stream), name="resilient_agent.caller_words"
        )

    def on_frame(self, frame: rtc.AudioFrame, now: float) -> None:
        """Pass one frame of the caller's audio to the listening stream, if one is open."""
        if self._asked is not None:
            unheard = self._unheard
            unheard.append((now, frame))
            while now - unheard[0][0] >= WORDS_RECENT_S:
                unheard.popleft()
        stream = self._stream
        if stream is None:
            return
        try:
            stream.push_frame(frame)
        except Exception as exc:  # on the audio path: a stream's fault must not reach livekit
            self._failed("frame_refused", exc)
            self.stop()

    def stop(self) -> None:
        """Close the listening stream (in the background); the words heard are kept."""
        self._stream = None
        self._asked = None
        self._unheard.clear()
        observed, self._observed = self._observed, None
        if observed is not None:
            observed.stop_observing_audio(self.on_frame)
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            if self._closing is None:
                self._closing = set()
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close the listening stream and wait until it is closed."""
        self.stop()
        for task in list(self._closing or ()):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _read(self, stream: stt.RecognizeStream) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for event in stream:
                if (
                    event.type
                    in (
                        stt.SpeechEventType.INTERIM_TRANSCRIPT,
                        stt.SpeechEventType.FINAL_TRANSCRIPT,
                    )
                    and event.alternatives
                ):
                    self.heard(event.alternatives[0].text, loop.time())
        except Exception as exc:
            self._failed("stream_failed", exc)
        finally:
            if self._stream is stream:
                self._stream = None
            await stream.aclose()

    def _failed(self, why: str, exc: BaseException) -> None:
        if self._told_failure:
            return
        self._told_failure = True
        logger.warning(
            "caller_words_unavailable",
            why=why,
            error=repr(exc),
            effect=(
                "the STT's listening stream failed: a protected speech no longer waits past "
                "its wait_s for a caller still saying words"
            ),
        )
