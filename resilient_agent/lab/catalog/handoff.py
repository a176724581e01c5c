"""The catalog's handoff mixes: typed text, a talked-over reply, a caller going on, a VAD fault."""

from __future__ import annotations

from ...testing import LLMRule, Scenario, ToolCallScript, Typed, Utterance, VADFault
from ...testing.vad import VADFaultMode
from . import agents

__all__ = [
    "handoff_mix_scenarios",
    "typed_during_handoff_scenarios",
    "vad_fault_in_handoff_scenarios",
]

_ASK_MANAGER = Utterance(1.0, 2.4, "let me talk to the manager", expect_reply=False)
_TRANSFER = LLMRule(when_user_says="manager", tool_calls=(ToolCallScript("transfer_to_manager"),))


def typed_during_handoff_scenarios() -> list[Scenario]:
    """Text typed while a transfer's protected message plays (found by the fuzzer)."""
    return [
        Scenario(
            name="lost_words/typed_during_handoff",
            family="lost_words",
            description=(
                "A transfer tool says a long protected message and hands the call to the "
                "manager 1.5 s into it; the caller types a chat message while it plays (found "
                "by the fuzzer)."
            ),
            agent=agents.protected_handoff_agent(delay_s=1.5),
            utterances=(_ASK_MANAGER,),
            # the message plays to its end (about 9.9 s), then the manager answers at once
            typed=(Typed(7.0, "do you have a table for two tonight", reply_within=4.0),),
            llm=(_TRANSFER,),
            duration=20.0,
        ),
        Scenario(
            name="lost_words/typed_reply_talked_over_in_handoff",
            family="lost_words",
            description=(
                "The caller types a chat message over a transfer's protected message just "
                "before the tool hands the call over; the reply, queued behind the message, is "
                "talked over, and the manager starts with a context of its own (found by the "
                "fuzzer)."
            ),
            agent=agents.protected_handoff_agent(delay_s=1.2),
            utterances=(
                Utterance(1.0, 3.5, "let me talk to the manager", expect_reply=False),
                # answered with the typed message once the caller stops (the message has ended)
                Utterance(10.0, 11.5, "my order number is twelve", reply_within=3.0),
            ),
            typed=(Typed(5.7, "is there parking nearby", reply_within=9.0),),
            llm=(_TRANSFER,),
            duration=24.0,
        ),
    ]


def handoff_mix_scenarios() -> list[Scenario]:
    """A handoff mixed with other windows (found by the fuzzer)."""
    return [
        Scenario(
            name="lost_words/reply_talked_over_during_handoff",
            family="lost_words",
            description=(
                "A chat message typed over a transfer's protected message is answered after it, "
                "still in the old agent; the caller talks over that answer while livekit hands "
                "the call over, which skips their turn (found by the fuzzer)."
            ),
            agent=agents.protected_handoff_agent(delay_s=2.5),
            utterances=(
                Utterance(1.0, 2.2, "let me talk to the manager", expect_reply=False),
                Utterance(10.0, 11.0, "and a high chair", reply_within=3.0),
            ),
            typed=(Typed(5.7, "is there parking nearby", reply_within=9.0),),
            llm=(_TRANSFER,),
            duration=24.0,
        ),
        Scenario(
            name="lost_words/typed_while_caller_speaks_in_handoff",
            family="lost_words",
            description=(
                "The caller types a chat message while talking over a transfer's protected "
                "message during the handoff; RoomIO's text callback ends its claim on the turn "
                "with 'listening' while the caller goes on (found by the fuzzer)."
            ),
            agent=agents.protected_handoff_agent(delay_s=0.4),
            utterances=(
                Utterance(1.0, 2.5, "let me talk to the manager", expect_reply=False),
                Utterance(4.0, 6.0, "my order number is twelve", reply_within=14.0),
                Utterance(6.35, 7.6, "for two people tonight", reply_within=12.0),
            ),
            typed=(Typed(6.3, "is there parking nearby", reply_within=13.5),),
            llm=(_TRANSFER,),
            duration=24.0,
        ),
        Scenario(
            name="talk_over/caller_goes_on_after_handoff_hold",
            family="talk_over",
            description=(
                "A transfer's protected message waits for the caller through the handoff; they "
                "pause just over the VAD's silence and go on, and the message must wait again "
                "(found by the fuzzer)."
            ),
            agent=agents.protected_handoff_agent(delay_s=0.4),
            utterances=(
                Utterance(1.0, 3.0, "let me talk to the manager", expect_reply=False),
                Utterance(4.0, 5.0, "hello are you there", reply_within=14.0),
                Utterance(5.55, 7.0, "I need to change my order", reply_within=12.0),
            ),
            llm=(_TRANSFER,),
            duration=24.0,
        ),
    ]


# (fault, handoff delay, end of the ask, typed at, the caller speaks at)
_VAD_FAULTS_IN_DRAIN: tuple[tuple[VADFaultMode, float, float, float, float], ...] = (
    ("dead", 0.4, 2.5, 3.63, 5.5),
    ("stuck", 1.5, 2.6, 5.12, 5.0),
)


def vad_fault_in_handoff_scenarios() -> list[Scenario]:
    """A VAD that dies or sticks while livekit drains the leaving agent (found by the fuzzer).

    A chat message typed over the transfer's protected message queues an interruptible reply
    behind it; livekit's drain waits for that reply, and the reply for a silence the failed VAD
    never reports, so the manager never starts and the caller's words are never answered.
    """
    # shrunk from fuzz/2026-1187 (dead, 0.4 s) and fuzz/99-99 (stuck, 1.5 s)
    return [
        Scenario(
            name=f"vad/{mode}_in_handoff_drain",
            family="vad",
            description=(
                f"A chat message is typed over a transfer's protected message, just before the "
                f"tool hands the call over; the caller then speaks and the VAD fails ({mode}) "
                f"while livekit drains the leaving agent (found by the fuzzer)."
            ),
            agent=agents.protected_handoff_agent(delay_s=delay_s),
            utterances=(
                Utterance(1.0, asked_until, "let me talk to the manager", expect_reply=False),
                # answered as soon as with a healthy VAD: after the transfer message (6 s), the
                # reply to the typed text, and the handoff (about 6 s after the words, 4.7-6.1 s
                # after the text)
                Utterance(said_at, said_at + 1.0, "a table for three", reply_within=7.0),
            ),
            typed=(Typed(typed_at, "any quiet corner seats", reply_within=7.0),),
            llm=(_TRANSFER,),
            vad_fault=VADFault(mode=mode, utterance=1, after=0.3),
            duration=24.0,
        )
        for mode, delay_s, asked_until, typed_at, said_at in _VAD_FAULTS_IN_DRAIN
    ]
