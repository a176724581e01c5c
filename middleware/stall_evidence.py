"""Evidence that a call has stalled, as values the watchdog acts on.

Each stall is judged on signs of life, not on a timer alone:

* ``user_turn_stuck``: the caller shows as speaking, yet the observer heard this turn's voice and
  then a quiet line for longer than the VAD's own silence window allows (a VAD that lost its
  END_OF_SPEECH, stuck or died). The evidence is strong once the turn's last transcript is a
  final one and the line has been quiet since before it: the VAD should have ended speech
  ``vad_silence_s`` after the quiet began, so ``stuck_margin_s`` more is enough. Without any
  transcript it takes ``quiet_s`` of quiet, and it is left to livekit altogether when the app set
  ``transcription_timeout``. A line that never carried a voice (frames of zeros, frames the
  observer never sees, a hum at the level of the line) gives no evidence, so nothing is done;
* ``turn_held_by_noise``: the caller shows as speaking, the turn's last transcript is a final
  one, and for ``noise_turn_s`` since it the STT heard no word while the line stayed loud (hold
  music, a TV, an IVR under the caller's question): the VAD will not end a turn on noise, and
  livekit holds the answer until the noise stops. A caller who goes on talking keeps producing
  transcripts, on an STT that sends interim ones (one that sends only finals is silent while
  the caller talks: no evidence there), and the period counts only from the last moment the
  agent spoke or livekit fed the STT silence (a protected speech: the caller's words then never
  reach it); a quiet line is ``user_turn_stuck``'s evidence;
* ``speech_waits_for_silence``: an interruptible speech is current and waits for the caller to
  stop, while for ``speech_wait_s`` the caller "speaks" words the STT does not hear (noise, or a
  VAD stuck on a loud line). A caller who really talks keeps producing transcripts;
* ``thinking_without_speech``: the agent has been ``thinking`` for ``thinking_s`` with a current
  speech, no tool running and the caller silent (an LLM or TTS request that hangs). The period
  counts from the last time one of these did not hold: the agent stays ``thinking`` while a tool
  runs, and the reply to a long tool's result gets the whole period once the tool is done;
* ``interrupted_speech_not_done``: a speech was interrupted ``interrupted_done_s`` ago and is not
  done; its ``cause`` says whether it waits for a running tool or for the audio output's report.

The first two read ``user_state`` as a local VAD's word. On a realtime model whose server
detects turns (:attr:`StallEvidence.server_turns`) it is the server's, which reports the caller
speaking on its own schedule (Gemini Live, while its own reply plays): they are not judged there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from livekit.agents.voice.speech_handle import SpeechHandle

from resilient_agent import ConversationState

from .audio_level import AudioLevelMeter
from .playout_ledger import PlayoutLedger

__all__ = ["CAUSE_PLAYOUT", "CAUSE_TOOL", "Stall", "StallEvidence", "StallKind", "StallThresholds"]

StallKind = Literal[
    "user_turn_stuck",
    "turn_held_by_noise",
    "speech_waits_for_silence",
    "thinking_without_speech",
    "interrupted_speech_not_done",
]
CAUSE_TOOL = "a tool it started is still running"
CAUSE_PLAYOUT = "the audio output never reported the cleared playout"


@dataclass(frozen=True)
class StallThresholds:
    """Seconds of missing progress before each stall counts.

    Attributes:
        quiet_s: For ``user_turn_stuck`` when the turn has no transcript.
        speech_wait_s: For ``speech_waits_for_silence``.
        thinking_s: For ``thinking_without_speech``.
        interrupted_done_s: For ``interrupted_speech_not_done``.
        vad_silence_s: The VAD's own silence window before it ends speech.
        stuck_margin_s: For ``user_turn_stuck`` with a final transcript in: quiet beyond the
            VAD's silence window.
        noise_turn_s: For ``turn_held_by_noise``: no word since the final transcript.
    """

    quiet_s: float
    speech_wait_s: float
    thinking_s: float
    interrupted_done_s: float
    vad_silence_s: float = 0.55
    stuck_margin_s: float = 0.25
    noise_turn_s: float = 2.0


@dataclass(frozen=True)
class Stall:
    """One stall, with the evidence for it.

    Attributes:
        kind: What stalled.
        for_s: Seconds without progress when it was found.
        speech: The speech concerned, if any.
        cause: What the speech waits for, when known.
    """

    kind: StallKind
    for_s: float
    speech: SpeechHandle | None = None
    cause: str = ""

    def details(self) -> dict[str, Any]:
        """The evidence, for logs and events."""
        found: dict[str, Any] = {"for_s": round(self.for_s, 2)}
        if self.speech is not None:
            found["speech_id"] = self.speech.id
        if self.cause:
            found["cause"] = self.cause
        return found


class StallEvidence:
    """Keeps the signs of life of one session, fed from livekit's events.

    Args:
        thresholds: When missing progress counts as a stall.
        meter: The caller's audio level, when the session has audio input.

    Attributes:
        server_turns: A realtime model's server detects the caller's turns: the caller's
            ``user_state`` is no evidence of a stuck turn or of a speech waiting for silence.
    """

    def __init__(self, thresholds: StallThresholds, meter: AudioLevelMeter | None) -> None:
        self.thresholds = thresholds
        self.meter = meter
        self.server_turns = False
        self.speaking_since: float | None = None
        self.last_transcript_at = float("-inf")
        self.last_transcript_final = False
        self.agent_state_since = 0.0
        self._waiting: tuple[str, float] | None = None
        self._thinking: tuple[str, float] | None = None
        self._thinking_ruled_out_at = float("-inf")
        self._interrupted_at: dict[str, float] = {}
        # when a turn was found held by noise: until the STT hears a word again, the line's
        # "speech" is known to be that noise, and a reply waiting for it to stop need not wait
        self.noise_known_at: float | None = None
        # an STT that sends interim transcripts reports words as they come: a silence of its
        # words means none are said; one that sends only finals is silent while the caller talks
        self.interims_heard = False
        # the last look at which the agent spoke, or livekit fed the STT silence (a protected
        # speech): the caller's words of that time cannot reach the STT, their absence is no sign
        self.stt_deaf_at = float("-inf")
        # what the last find() computed for user_turn_stuck_due: a look that found no stall
        # reads it to time the next look (nothing find() changes afterwards moves it)
        self.last_turn_stuck_due: tuple[float, float] | None = None
        # what the last find() saw of the live speeches (its one walk of them): whether one is
        # live (created, not done), and whether one of those was interrupted
        self.speech_live = False
        self.interrupted_live = False
        # the VAD's own silence window, read only when a stuck turn's evidence weighs it (the
        # session's VAD can be swapped at any time, with no event): None keeps the threshold's
        self.read_vad_silence: Callable[[], float | None] | None = None
        # whether a turn without any transcript is livekit's to handle (the app set
        # ``transcription_timeout``), read only when a stuck turn without one is weighed
        self.read_leave_untranscribed: Callable[[], bool] | None = None

    def user_state_changed(self, speaking: bool, now: float) -> None:
        """The caller started or stopped speaking."""
        self.speaking_since = now if speaking else None
        if self.meter is not None:
            # the line's level matters only while the caller shows as speaking
            self.meter.want("Watchdog", speaking)
            if speaking:
                self.meter.start_turn()

    def passed_look(self, at: float) -> None:
        """What a look at ``at`` that could find nothing notes (the watchdog skipped it).

        Such a look finds the caller speaking or the agent not thinking, no live speech and no
        stuck turn building up: no speech waits, the agent's thinking is ruled out then.
        """
        self._waiting = None
        self._thinking = None
        self._thinking_ruled_out_at = at
        self.last_turn_stuck_due = None

    def agent_state_changed(self, now: float) -> None:
        """The agent moved to another state."""
        self.agent_state_since = now

    def transcript(self, now: float, *, final: bool = False) -> None:
        """The STT heard something."""
        self.last_transcript_at = now
        self.last_transcript_final = final
        self.noise_known_at = None
        if not final:
            self.interims_heard = True

    @property
    def final_transcript_in(self) -> bool:
        """Whether the turn's last transcript is a final one (no interim words pending)."""
        return self._transcribed_this_turn() and self.last_transcript_final

    def _transcribed_this_turn(self) -> bool:
        return self.speaking_since is not None and self.last_transcript_at >= self.speaking_since

    def find(
        self,
        now: float,
        state: ConversationState,
        current_speech: SpeechHandle | None,
        ledger: PlayoutLedger | None,
        *,
        leave_untranscribed: bool | None = None,
    ) -> Stall | None:
        """The most urgent stall there is evidence for, or None.

        Args:
            now: Loop time.
            state: The conversation.
            current_speech: The session's current speech.
            ledger: The audio output's playout reports.
            leave_untranscribed: A turn without any transcript is livekit's to handle (the app
                set ``transcription_timeout``); None asks ``read_leave_untranscribed`` when it
                matters (no reader: it is not).
        """
        # one pass in the order of urgency; a predicate after the first stall found is not
        # weighed (nor are its notes taken), as with ``or`` over them
        stall = self._interrupted_speech_not_done(now, state, ledger)
        if stall is not None:
            return stall
        if state.user_state == "speaking" and not self.server_turns:
            stall = self._user_turn_stuck(now, state, leave_untranscribed)
            if stall is None:
                stall = self._turn_held_by_noise(now)
            if stall is not None:
                return stall
            if current_speech is not None and state.agent_state != "speaking":
                stall = self._speech_waits_for_silence(now, current_speech)
                if stall is not None:
                    return stall
            else:
                self._waiting = None
            # the caller speaks: the agent's thinking is ruled out
            self._thinking = None
            self._thinking_ruled_out_at = now
            return None
        self.last_turn_stuck_due = None
        self._waiting = None
        return self._thinking_without_speech(now, state, current_speech, ledger)

    def _interrupted_speech_not_done(
        self, now: float, state: ConversationState, ledger: PlayoutLedger | None
    ) -> Stall | None:
        alive = state.speeches  # keyed by speech id
        if self._interrupted_at:
            for speech_id in [i for i in self._interrupted_at if i not in alive]:
                del self._interrupted_at[speech_id]
        self.speech_live = self.interrupted_live = False
        for speech_id, info in alive.items():
            handle = info.handle
            if handle.done():
                continue
            self.speech_live = True
            if not handle.interrupted:
                continue
            self.interrupted_live = True
            since = self._interrupted_at.setdefault(speech_id, now)
            if now - since < self.thresholds.interrupted_done_s:
                continue
            if _tool_running_for(handle, state):
                cause = CAUSE_TOOL
            elif ledger is not None and ledger.unreported > 0:
                cause = CAUSE_PLAYOUT
            else:
                cause = ""
            return Stall("interrupted_speech_not_done", now - since, handle, cause)
        return None

    def _user_turn_stuck(
        self, now: float, state: ConversationState, leave_untranscribed: bool | None
    ) -> Stall | None:
        due = self.user_turn_stuck_due(state, leave_untranscribed=leave_untranscribed)
        self.last_turn_stuck_due = due
        if due is None or now < due[0]:
            return None
        return Stall("user_turn_stuck", now - due[1])

    def user_turn_stuck_due(
        self, state: ConversationState, *, leave_untranscribed: bool | None = None
    ) -> tuple[float, float] | None:
        """When the caller's turn will count as stuck if nothing changes, and since when quiet.

        None while there is no evidence building up (see the module docstring).
        """
        meter = self.meter
        if (
            self.server_turns
            or state.user_state != "speaking"
            or self.speaking_since is None
            or meter is None
            or not meter.voice_heard
            or meter.quiet_since is None
        ):
            return None
        quiet_since = max(meter.quiet_since, self.speaking_since)
        transcribed = self._transcribed_this_turn()
        if transcribed and self.last_transcript_final and self.last_transcript_at >= quiet_since:
            # the STT finished the words before the quiet: the VAD should have ended speech
            needed = self._vad_silence_s() + self.thresholds.stuck_margin_s
        elif not transcribed and self._leaves_untranscribed(leave_untranscribed):
            return None
        else:
            # no transcript, or words the STT has not finished: a longer quiet is needed
            needed = self.thresholds.quiet_s
        return quiet_since + needed, quiet_since

    def _leaves_untranscribed(self, told: bool | None) -> bool:
        if told is not None:
            return told
        read = self.read_leave_untranscribed
        return read is not None and read()

    def _vad_silence_s(self) -> float:
        read = self.read_vad_silence
        window = read() if read is not None else None
        return self.thresholds.vad_silence_s if window is None else window

    def _turn_held_by_noise(self, now: float) -> Stall | None:
        # the caller shows as speaking, on a local VAD's word (find() asks only then)
        if not self.interims_heard or not self.final_transcript_in:
            return None
        words_done_for = now - max(self.last_transcript_at, self.stt_deaf_at)
        if words_done_for < self.thresholds.noise_turn_s:
            return None
        self.noise_known_at = now
        return Stall("turn_held_by_noise", words_done_for)

    def _speech_waits_for_silence(self, now: float, speech: SpeechHandle) -> Stall | None:
        # the caller shows as speaking, on a local VAD's word, and the agent does not speak
        # (find() asks only then)
        if not speech.allow_interruptions or speech.interrupted or speech.done():
            self._waiting = None
            return None
        if self._waiting is None or self._waiting[0] != speech.id:
            self._waiting = (speech.id, now)
        no_words_for = now - max(self._waiting[1], self.last_transcript_at)
        # noise already found holding the caller's turn, and no word since: nothing to wait for
        needed = 0.0 if self.noise_known_at is not None else self.thresholds.speech_wait_s
        if no_words_for < needed:
            return None
        return Stall("speech_waits_for_silence", no_words_for, speech)

    def _thinking_without_speech(
        self,
        now: float,
        state: ConversationState,
        speech: SpeechHandle | None,
        ledger: PlayoutLedger | None,
    ) -> Stall | None:
        # a speech that waits for its tools is not current, so long tools never count here.
        # Audio playing out is speech: a reply that became current while another speech's tool
        # ran plays on while that speech makes its tool reply, and livekit says "thinking"
        if (
            speech is None
            or speech.done()
            or state.agent_state != "thinking"
            or state.user_state == "speaking"
            or state.tools_in_flight
            or (ledger is not None and ledger.playing)
        ):
            self._thinking = None
            self._thinking_ruled_out_at = now
            return None
        if self._thinking is None:
            # the period starts when the agent began thinking or, if later, when the last sign
            # of progress ended: a tool that ran for a while, a caller who spoke
            self._thinking = (speech.id, max(self.agent_state_since, self._thinking_ruled_out_at))
        elif self._thinking[0] != speech.id:
            # another speech took over while the agent kept thinking (a reply asked for again):
            # it gets the whole period
            self._thinking = (speech.id, now)
        thinking_for = now - max(self._thinking[1], self.agent_state_since)
        if thinking_for < self.thresholds.thinking_s:
            return None
        return Stall("thinking_without_speech", thinking_for, speech)


def _tool_running_for(handle: SpeechHandle, state: ConversationState) -> bool:
    for call in state.tools_in_flight.values():
        owner = call.run_context.speech_handle if call.run_context is not None else None
        # a tool without a RunContext cannot be tied to its speech: assume it is this one's
        if owner is None or owner is handle:
            return True
    return False
