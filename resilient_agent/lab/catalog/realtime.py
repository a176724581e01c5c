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

from ...testing import LLMRule, ProviderFaults, Scenario, ToolCallScript, Utterance
from ...testing.realtime import Flavour
from . import agents
from .agents.realtime import (
    GREETING,
    app_protected_greeting_agent,
    protected_greeting_agent,
    protected_transfer_agent,
)
from .hangup import GOODBYE, SAYS_BYE

__all__ = [
    "livekit_goodbye_never_comes",
    "realtime_controls",
    "realtime_scenarios",
    "reply_cut_by_server_error",
    "reply_never_comes",
]

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
_AFTER_GREETING = Utterance(6.5, 8.5, _PARCEL)

# a reply that never comes (the first request hangs until cancelled): the model's no-race
# latency is 0.3 s; asked again 5 s after the caller's voice, answered 0.3 s later
_ASK_PARCEL = Utterance(1.0, 3.0, _PARCEL, reply_within=6.0)
_HANGING_PARCEL = LLMRule(
    text="Your parcel is at the depot.", when_user_says="parcel", hangs_before=6.0
)
# a reply cut by the server's error close halfway through its audio (1.9 s of 3.8 s heard); the
# model, told its reply was cut (RealtimeReplyWatch's instructions), gives it again
_DEPOT = "Your parcel is at the depot and arrives tomorrow morning."
_CUT_PARCEL = (
    LLMRule(text=_DEPOT, when_user_says="parcel"),
    LLMRule(text=_DEPOT, when_instructed="cut off"),
)
_ASK_PARCEL_SLOW = Utterance(1.0, 3.0, _PARCEL, reply_within=5.0)
_SLOW_PARCEL = LLMRule(text="Your parcel is at the depot.", when_user_says="parcel", ttft=4.0)

_REFUND = "wait actually how long does a refund take"
_GOODBYE_REPLY = LLMRule(after_tool="end_call", text=agents.FAREWELL)
_HANGING_GOODBYE = LLMRule(after_tool="end_call", text=agents.FAREWELL, hangs_before=60.0)
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
                name=f"realtime/{flavour}/words_over_app_protected_greeting",
                family="realtime",
                description=(
                    f"{flavour}: the app asks for its greeting with generate_reply(..., "
                    "allow_interruptions=False); the caller asks about a parcel over it."
                ),
                agent=app_protected_greeting_agent,
                utterances=(_OVER_GREETING,),
                llm=(_ANSWER_PARCEL,),
                duration=14.0,
                talk_over_tolerance=None,
                protected_lines=(GREETING,),
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
    found.append(reply_cut_by_server_error())
    # Gemini's hung reply is recovered into its open generation (tests/test_realtime_reply.py,
    # tests/test_gemini_live.py): not in the catalog yet
    found.append(reply_never_comes("openai"))
    found.append(livekit_goodbye_never_comes("openai"))
    return found


def livekit_goodbye_never_comes(flavour: Flavour) -> Scenario:
    """An ``EndCallTool`` of livekit whose goodbye never comes: its handle never finishes."""
    return Scenario(
        name=f"realtime/{flavour}/livekit_goodbye_never_comes",
        family="realtime",
        description=(
            f"{flavour}: livekit's EndCallTool; the model's goodbye never comes, so the "
            "tool's hang-up, attached to the goodbye's handle, never runs."
        ),
        agent=agents.livekit_end_call_agent,
        utterances=(GOODBYE,),
        llm=(SAYS_BYE, _HANGING_GOODBYE),
        farewell=agents.FAREWELL,
        session_options=dict(_QUICK_CLOSE),
        # 5 s of a quiet line after the caller's goodbye, then livekit ends the call
        hang_up_without_farewell_within=8.0,
        model=_model(flavour),  # type: ignore[arg-type]
    )


def reply_cut_by_server_error(*, after_reply: bool = False) -> Scenario:
    """The caller asks about a parcel; Gemini's server fails (1011) halfway through the answer.

    With ``after_reply`` (a control, on a realtime stack only) the server fails once the answer
    is whole, while it waits for its playout: nothing is asked again.
    """
    faults = (
        ProviderFaults(realtime_error_after_reply=1)
        if after_reply
        else ProviderFaults(realtime_error_mid_reply=1)
    )
    return Scenario(
        name=(
            "control/realtime_gemini_error_after_reply"
            if after_reply
            else "realtime/gemini/reply_cut_by_server_error"
        ),
        family="control" if after_reply else "realtime",
        description=(
            "gemini: the caller asks about a parcel; the server closes with an internal error "
            + (
                "once the answer is whole, before its turn ends."
                if after_reply
                else "(1011) halfway through the answer; the plugin reconnects."
            )
        ),
        agent=agents.plain_agent,
        utterances=(_ASK_PARCEL,),
        llm=_CUT_PARCEL,
        provider_faults=faults,
        control=after_reply,
        model=_model("gemini"),  # type: ignore[arg-type]
    )


def reply_never_comes(flavour: Flavour) -> Scenario:
    """The caller asks about a parcel; the model's reply never comes (it hangs until cancelled)."""
    return Scenario(
        name=f"realtime/{flavour}/reply_never_comes",
        family="realtime",
        description=(
            f"{flavour}: the caller asks about a parcel; the model's reply never comes "
            "(the server hangs until it is cancelled)."
        ),
        agent=agents.plain_agent,
        utterances=(_ASK_PARCEL,),
        llm=(_HANGING_PARCEL,),
        model=_model(flavour),  # type: ignore[arg-type]
    )


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
                name=f"control/realtime_{flavour}_app_protected_greeting",
                family="control",
                description=(
                    f"{flavour}: the app's greeting asked with allow_interruptions=False; the "
                    "caller asks about a parcel once it is over."
                ),
                agent=app_protected_greeting_agent,
                utterances=(_AFTER_GREETING,),
                llm=(_ANSWER_PARCEL,),
                duration=14.0,
                protected_lines=(GREETING,),
                control=True,
                model=_model(flavour),  # type: ignore[arg-type]
            ),
            Scenario(
                name=f"control/realtime_{flavour}_slow_reply",
                family="control",
                description=(
                    f"{flavour}: the model takes 4 s to answer, under the bound of a reply "
                    "that never comes: nothing is asked again."
                ),
                agent=agents.plain_agent,
                utterances=(_ASK_PARCEL_SLOW,),
                llm=(_SLOW_PARCEL,),
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
