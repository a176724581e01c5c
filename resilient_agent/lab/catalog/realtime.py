"""The realtime family: the seed races on a speech-to-speech model, for each provider's habits.

On a realtime model (OpenAI Realtime, Gemini Live; the lab's
:class:`~resilient_agent.testing.realtime.ScriptedRealtimeModel`) there is no STT and no TTS:
the model hears the caller's audio and speaks itself, and its server detects turns. livekit
feeds it silence for the caller's audio while a protected speech plays, so what the caller says
then never reaches it; a goodbye the caller talks over is livekit's to hang up on all the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ...testing import LLMRule, Scenario, ToolCallScript, Utterance
from ...testing.realtime import Flavour
from . import agents
from .agents.realtime import protected_greeting_agent, protected_transfer_agent
from .hangup import GOODBYE, SAYS_BYE

__all__ = ["realtime_controls", "realtime_scenarios"]

FLAVOURS: tuple[Flavour, ...] = ("openai", "gemini")

_PREAMBLE = "Let me book that table for you, one moment please."
_BOOKED = "Your table is booked."
_CHANGED = "Nine it is, I changed the booking."
_BOOK_WITH_PREAMBLE = LLMRule(
    text=_PREAMBLE,
    when_user_says="book",
    tool_calls=(ToolCallScript("book_table", {"time": "eight"}),),
)
_TOOL_REPLY = LLMRule(text=_BOOKED, after_tool="book_table")
_ANSWER_CHANGE = LLMRule(text=_CHANGED, when_user_says="nine")
_ASK_BOOKING = Utterance(1.0, 2.8, "please book a table for eight", reply_within=8.0)
# said over the protected preamble and the tool's work: answered once the protection ends, after
# the booking's reply where livekit protects it too (OpenAI: the reply is livekit's speech), at
# 1.5 times the model's no-race latency (0.3 s) after that
_CHANGE = Utterance(4.0, 5.7, "actually make it nine instead", reply_within=5.0)

_PARCEL = "where is my parcel it was due yesterday"
_ANSWER_PARCEL = LLMRule(text="Let me look that parcel up for you.", when_user_says="parcel")
# the transfer's preamble plays 3.6-7.6 s, protected by its tool from 3.8 s; the tool hands
# over at 5.3 s and livekit completes the handoff once the preamble has played
_TRANSFER = LLMRule(
    text="Let me put you through to the manager, one moment please.",
    when_user_says="manager",
    tool_calls=(ToolCallScript("transfer_to_manager", {}),),
)
_ASK_MANAGER = Utterance(1.0, 2.8, "can i speak to the manager please", reply_within=8.0)
_CHANGE_FOR_MANAGER = Utterance(4.0, 5.7, "actually make it nine instead", reply_within=6.0)
# Gemini's silent turn, once: a model asked again answers with audio
_SILENT_ONCE = LLMRule(
    text="Your parcel arrives tomorrow morning.", when_user_says="parcel", silent_answers=1
)
# the greeting plays 5.1 s from 0.3 s; the words over it are answered after it
_OVER_GREETING = Utterance(1.5, 3.5, _PARCEL, reply_within=3.0)

_REFUND = "wait actually how long does a refund take"
_GOODBYE_REPLY = LLMRule(after_tool="end_call", text=agents.FAREWELL)
_ANSWER_REFUND = LLMRule(when_user_says="refund", text="A refund takes five working days.")
_QUICK_CLOSE: Mapping[str, float] = MappingProxyType({"session_close_transcript_timeout": 0.5})


def _model(flavour: Flavour) -> str:
    return f"realtime_{flavour}"


def realtime_scenarios() -> list[Scenario]:
    """The races, once per provider."""
    found = []
    for flavour in FLAVOURS:
        found += [
            Scenario(
                name=f"realtime/{flavour}/words_over_protected_tool",
                family="realtime",
                description=(
                    f"{flavour}: the model speaks a preamble with its tool call; the tool "
                    "protects it and works 2 s; the caller changes the booking over them."
                ),
                agent=agents.booking_agent("disallow", work_seconds=2.0),
                utterances=(_ASK_BOOKING, _CHANGE),
                llm=(_BOOK_WITH_PREAMBLE, _TOOL_REPLY, _ANSWER_CHANGE),
                model=_model(flavour),  # type: ignore[arg-type]
            ),
            Scenario(
                name=f"realtime/{flavour}/words_over_protected_greeting",
                family="realtime",
                description=(
                    f"{flavour}: the app protects its greeting; the caller asks about a parcel "
                    "over it."
                ),
                agent=protected_greeting_agent,
                utterances=(_OVER_GREETING,),
                llm=(_ANSWER_PARCEL,),
                duration=14.0,
                # the caller talks over a greeting that began before they did
                talk_over_tolerance=None,
                model=_model(flavour),  # type: ignore[arg-type]
            ),
            Scenario(
                name=f"realtime/{flavour}/question_over_livekit_goodbye",
                family="realtime",
                description=(
                    f"{flavour}: livekit's EndCallTool; 1.1 s into the model's goodbye the "
                    "caller asks a question."
                ),
                agent=agents.livekit_end_call_agent,
                utterances=(GOODBYE, Utterance(4.6, 6.6, _REFUND)),
                llm=(SAYS_BYE, _GOODBYE_REPLY, _ANSWER_REFUND),
                farewell=agents.FAREWELL,
                session_options=dict(_QUICK_CLOSE),
                model=_model(flavour),  # type: ignore[arg-type]
            ),
            Scenario(
                name=f"realtime/{flavour}/words_over_protected_transfer",
                family="realtime",
                description=(
                    f"{flavour}: the transfer tool protects the model's preamble and hands the "
                    "call to the manager in it; the caller changes the booking over it."
                ),
                agent=protected_transfer_agent(delay_s=1.5),
                utterances=(_ASK_MANAGER, _CHANGE_FOR_MANAGER),
                llm=(_TRANSFER, _ANSWER_CHANGE),
                duration=20.0,
                model=_model(flavour),  # type: ignore[arg-type]
            ),
        ]
    found.append(
        Scenario(
            name="realtime/gemini/silent_turn",
            family="realtime",
            description=(
                "gemini: the model answers the caller's question with text only, in audio mode "
                "(a silent turn): nothing is played."
            ),
            agent=agents.plain_agent,
            utterances=(Utterance(1.0, 3.0, _PARCEL, reply_within=3.0),),
            llm=(_SILENT_ONCE,),
            model=_model("gemini"),  # type: ignore[arg-type]
        )
    )
    return found


def realtime_controls() -> list[Scenario]:
    """Race-free realtime calls, once per provider: they must pass on a plain ``Agent`` too."""
    found = []
    for flavour in FLAVOURS:
        found += [
            Scenario(
                name=f"control/realtime_{flavour}_booking",
                family="control",
                description=f"{flavour}: a booking through a protected tool, nobody talks over.",
                agent=agents.booking_agent("disallow", work_seconds=2.0),
                utterances=(_ASK_BOOKING,),
                llm=(_BOOK_WITH_PREAMBLE, _TOOL_REPLY),
                tools_complete=("book_table",),
                control=True,
                model=_model(flavour),  # type: ignore[arg-type]
            ),
            Scenario(
                name=f"control/realtime_{flavour}_goodbye_heard",
                family="control",
                description=(
                    f"{flavour}: livekit's EndCallTool; the goodbye is heard: the call ends "
                    "whole within 1 s."
                ),
                agent=agents.livekit_end_call_agent,
                utterances=(GOODBYE,),
                llm=(SAYS_BYE, _GOODBYE_REPLY),
                farewell=agents.FAREWELL,
                session_options=dict(_QUICK_CLOSE),
                hang_up_within=1.0,
                control=True,
                model=_model(flavour),  # type: ignore[arg-type]
            ),
        ]
    return found
