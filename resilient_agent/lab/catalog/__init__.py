"""The race catalog: every timing race the lab reproduces, plus controls that must keep passing.

Timings are chosen from the lab's own clock: the caller's turn ends 0.55 s after they stop (VAD
silence), the scripted LLM answers after 0.3 s, and TTS speaks 15 characters a second.
"""

from __future__ import annotations

import dataclasses

from ...testing import (
    LLMRule,
    NoiseWindow,
    Scenario,
    Sweep,
    ToolCallScript,
    Typed,
    Utterance,
    VADFault,
)
from ...testing.vad import VADFaultMode
from . import agents
from .fuzz_found import fuzz_found_controls, fuzz_found_scenarios
from .handoff import (
    handoff_mix_scenarios,
    typed_during_handoff_scenarios,
    vad_fault_in_handoff_scenarios,
)
from .hangup import GOODBYE as _GOODBYE
from .hangup import HANG_UP as _HANG_UP
from .hangup import SAYS_BYE as _BYE
from .hangup import end_call_scenarios
from .provider_faults import provider_fault_scenarios
from .realtime import realtime_controls, realtime_scenarios
from .turn_handling import turn_handling_controls, turn_handling_scenarios
from .typed import typed_over_queued_reply_scenarios
from .wait import long_talker_scenarios
from .workflows import workflow_controls, workflow_scenarios

__all__ = ["CATALOG", "scenarios"]

# A stuck VAD can only be recovered after evidence builds up: the watchdog's 2 s quiet threshold
# plus 1.5 times the no-race reply latency (1.2 s) bounds the answer.
_VAD_FAULT_BOUND = 2.0 + 1.5 * 1.2
# The turn ends (within the 1.2 s no-race latency), the agent thinks for the watchdog's 6 s, then
# a fresh reply comes at 1.5 times the no-race latency.
_THINKING_BOUND = 1.2 + 6.0 + 1.5 * 1.2
# The first answer (1.2 s), the 2 s tool, the watchdog's 3 s wait for a silence, 1.5 times 1.2 s.
_NOISE_BOUND = 1.2 + 2.0 + 3.0 + 1.5 * 1.2
# A protected hold message that would start over the caller waits for them to stop (the VAD ends
# their turn 0.55 s after they do), then is heard whole, as the app asked, before their words can
# be answered: the message's length (TTS speaks 15 characters a second) comes on top of the
# usual bound. With a faulty VAD the hold ends once the caller's line has been quiet for
# WaitForCaller's QUIET_LINE_S (1 s) instead.
_HOLD_MESSAGE_S = len(agents.HOLD_MESSAGE) / 15
_AFTER_HELD_MESSAGE_BOUND = 0.55 + _HOLD_MESSAGE_S + 1.5 * 1.2
_AFTER_HELD_MESSAGE_FAULTY_VAD_BOUND = 1.0 + _HOLD_MESSAGE_S + 1.5 * 1.2

# A protected transfer message held for a caller who talks over its start, then heard whole (it
# is 5.9 s long) before the manager answers.
_AFTER_TRANSFER_BOUND = 0.55 + len(agents.TRANSFER_MESSAGE) / 15 + 1.5 * 1.2

# A preamble protected while livekit held it for the caller waits for them to stop, then plays
# its rest (3.47 s long, 0.62 s heard before the pause) before the caller's words are answered.
_PREAMBLE = "Let me check the reservation book for you right now."
_AFTER_RESUMED_PREAMBLE_BOUND = 0.55 + (len(_PREAMBLE) / 15 - 0.62) + 1.5 * 1.2

_BOOK = LLMRule(
    when_user_says="book",
    tool_calls=(ToolCallScript("book_table", {"time": "eight"}),),
    ttft=0.3,
    duration=0.5,
)
_BOOK_WITH_PREAMBLE = LLMRule(
    text=_PREAMBLE,
    when_user_says="book",
    tool_calls=(ToolCallScript("book_table", {"time": "eight"}),),
)
_BOOKED = LLMRule(text="Your table is booked.", after_tool="book_table")

# The booking is answered by the tool's result, after the hold message and the booking work.
_MONOLOGUE = " ".join(
    ["so we are twelve people and two of them are vegetarian and one needs a high chair"] * 5
)
# a question under noise: the VAD ends the turn only once the noise stops; the Watchdog ends it
# 2 s after the final transcript (noise_turn_s) and plays the reply over the noise: 3.45 s
_OPEN_QUESTION = Utterance(3.0, 4.6, "what time do you open tomorrow", reply_within=4.0)
_OPEN_ANSWER = LLMRule(when_user_says="open", text="We open at noon.")
_ASK_BOOKING = Utterance(1.0, 2.8, "please book a table for eight", reply_within=8.0)


def _tool_gap() -> list[Scenario]:
    return [
        *_tool_gap_holds(),
        *_tool_gap_slow_tools(),
        *_tool_gap_resumed_preamble(),
        *_tool_gap_vad_faults(),
    ]


_CHANGE = "actually make it nine instead"


def _tool_gap_holds() -> list[Scenario]:
    found = []
    change_over_hold = Utterance(3.7, 5.4, _CHANGE, reply_within=_AFTER_HELD_MESSAGE_BOUND)
    for style in ("protected_say", "disallow_and_say"):
        found.append(
            Scenario(
                name=f"tool_gap/gap_{style}",
                family="tool_gap",
                description=(
                    "The caller goes on talking in the gap between the tool call and the tool's "
                    f"protected hold message ({style})."
                ),
                agent=agents.booking_agent(style, work_seconds=2.0),
                utterances=(_ASK_BOOKING, change_over_hold),
                llm=(_BOOK, _BOOKED),
                # before 3.4 s the VAD never ended the first turn: one long turn, no gap
                sweep=Sweep(utterance=1, start=3.4, stop=5.0, step=0.1),
            )
        )
    return found


def _tool_gap_slow_tools() -> list[Scenario]:
    found = []
    found.append(
        Scenario(
            name="tool_gap/business_logic_long",
            family="tool_gap",
            description=(
                "The caller speaks while a tool runs 9 s of business logic after its protected "
                "hold message; the owning speech is interrupted with more than 5 s left."
            ),
            agent=agents.booking_agent("protected_say", work_seconds=9.0),
            utterances=(
                dataclasses.replace(_ASK_BOOKING, reply_within=14.0),
                Utterance(6.5, 7.8, _CHANGE),
            ),
            llm=(_BOOK, _BOOKED),
            duration=25.0,
            sweep=Sweep(utterance=1, start=5.5, stop=10.0, step=0.25),
        )
    )
    found.append(
        Scenario(
            name="tool_gap/business_logic_plain",
            family="tool_gap",
            description=(
                "A plain slow tool (7 s) is interrupted by the caller: the interruption waits "
                "for the tool and the result is never spoken."
            ),
            agent=agents.booking_agent("plain", work_seconds=7.0),
            utterances=(
                dataclasses.replace(_ASK_BOOKING, reply_within=12.0),
                Utterance(4.5, 5.8, _CHANGE),
            ),
            llm=(_BOOK, _BOOKED),
            duration=25.0,
        )
    )
    found.append(
        Scenario(
            name="tool_gap/cancellable_tool_interrupted",
            family="tool_gap",
            description=(
                "The caller changes the subject while a 9 s tool flagged CANCELLABLE runs: the "
                "interruption waits for the tool."
            ),
            agent=agents.availability_agent(work_seconds=9.0),
            utterances=(
                # answered together with the second turn, once the caller changed the subject
                Utterance(1.0, 2.8, "is a table available tonight", reply_within=14.0),
                Utterance(6.5, 7.8, "never mind what time do you close"),
            ),
            llm=(
                LLMRule(
                    when_user_says="available",
                    tool_calls=(ToolCallScript("check_availability"),),
                ),
                LLMRule(text="We have tables free at eight.", after_tool="check_availability"),
            ),
            duration=25.0,
        )
    )
    return found


def _tool_gap_resumed_preamble() -> list[Scenario]:
    found = []
    found.append(
        Scenario(
            name="tool_gap/protected_on_resume",
            family="tool_gap",
            description=(
                "The caller talks over the LLM's interruptible preamble, so livekit pauses it; "
                "1 s into its work the tool calls disallow_interruptions(), and livekit resumes "
                "the now-protected preamble while the caller is still talking."
            ),
            agent=agents.late_protecting_agent(before_s=1.0, after_s=2.0),
            utterances=(
                _ASK_BOOKING,
                # the preamble plays from 4.0 s; livekit pauses it at 4.62 s (0.05 s VAD onset
                # and 0.5 s of speech to interrupt), the tool protects and resumes it at 4.85 s
                Utterance(
                    4.1,
                    7.0,
                    "for four people outside on the terrace please",
                    reply_within=_AFTER_RESUMED_PREAMBLE_BOUND,
                ),
            ),
            llm=(_BOOK_WITH_PREAMBLE, _BOOKED),
            duration=22.0,
            # from 4.4 s livekit has not paused the preamble before the tool protects it
            sweep=Sweep(utterance=1, start=3.9, stop=4.5, step=0.1),
        )
    )
    return found


def _tool_gap_vad_faults() -> list[Scenario]:
    found = []
    faults: tuple[VADFaultMode, ...] = ("no_end_of_speech", "stuck", "dead")
    for mode in faults:
        found.append(
            Scenario(
                name=f"tool_gap/vad_{mode}",
                family="tool_gap",
                description=(
                    f"The caller speaks in the tool gap and the VAD fails ({mode}) on that "
                    "utterance."
                ),
                agent=agents.booking_agent("disallow_and_say", work_seconds=2.0),
                utterances=(
                    _ASK_BOOKING,
                    Utterance(3.7, 5.4, _CHANGE, reply_within=_AFTER_HELD_MESSAGE_FAULTY_VAD_BOUND),
                ),
                llm=(_BOOK, _BOOKED),
                vad_fault=VADFault(mode=mode, utterance=1),
                reply_bound=_VAD_FAULT_BOUND,
            )
        )
    return found


_NOTICE = "This call is recorded for quality and training purposes, thank you for waiting."


def _lost_words() -> list[Scenario]:
    return [*_lost_words_over_announcements(), *_lost_words_elsewhere()]


def _lost_words_over_announcements() -> list[Scenario]:
    notice = _NOTICE
    return [
        Scenario(
            name="lost_words/over_protected_say",
            family="lost_words",
            description="The caller speaks entirely over a protected announcement.",
            agent=agents.greeting_agent(protected=True, text=notice),
            utterances=(Utterance(1.5, 3.5, "hello can you hear me"),),
        ),
        Scenario(
            name="lost_words/straddling_protected_end",
            family="lost_words",
            description="The caller starts during a protected announcement and ends after it.",
            agent=agents.greeting_agent(protected=True, text=notice),
            utterances=(Utterance(4.3, 6.8, "I want to change my booking please"),),
            sweep=Sweep(utterance=0, start=3.0, stop=6.0, step=0.25),
        ),
        Scenario(
            name="lost_words/between_call_and_output",
            family="lost_words",
            description=(
                "The caller speaks over the protected preamble the LLM says before a tool that "
                "disallows interruptions."
            ),
            agent=agents.booking_agent("disallow", work_seconds=3.0),
            utterances=(_ASK_BOOKING, Utterance(4.4, 6.0, "for four people outside")),
            llm=(_BOOK_WITH_PREAMBLE, _BOOKED),
            duration=22.0,
        ),
        Scenario(
            name="lost_words/over_protected_say_real_vad",
            family="lost_words",
            description=(
                "Real speech (espeak-ng) over a protected announcement, heard by livekit's "
                "embedded Silero VAD."
            ),
            agent=agents.greeting_agent(protected=True, text=notice),
            utterances=(Utterance.recorded(1.5, "table_for_two"),),
            vad="silero",
        ),
    ]


def _lost_words_elsewhere() -> list[Scenario]:
    notice = _NOTICE
    found = [
        Scenario(
            name="lost_words/over_greeting_aec_warmup",
            family="lost_words",
            description="The caller talks over the greeting during AEC warm-up.",
            agent=agents.greeting_agent(protected=False, text="Hello, how can I help?"),
            utterances=(Utterance(0.6, 1.8, "hi I need help"),),
            aec_warmup=3.0,
        ),
        Scenario(
            name="lost_words/during_handoff",
            family="lost_words",
            description=(
                "The caller speaks while a handoff pauses scheduling (the old agent's on_exit "
                "saves a file for 2 s)."
            ),
            agent=agents.handoff_agent(exit_work_seconds=2.0),
            utterances=(
                Utterance(1.0, 2.5, "let me talk to the manager", expect_reply=False),
                Utterance(3.6, 4.6, "my order number is twelve"),
            ),
            llm=(
                LLMRule(
                    when_user_says="manager",
                    tool_calls=(ToolCallScript("transfer_to_manager"),),
                ),
            ),
            duration=12.0,
        ),
        Scenario(
            name="lost_words/typed_over_protected_say",
            family="lost_words",
            description=(
                "The caller types a chat message while a protected announcement plays (RoomIO's "
                "default text input)."
            ),
            agent=agents.greeting_agent(protected=True, text=notice),
            utterances=(),
            typed=(Typed(3.0, "do you have a table for two tonight"),),
        ),
        *typed_over_queued_reply_scenarios(),
        *_lost_words_in_pauses(notice),
        *typed_during_handoff_scenarios(),
        *handoff_mix_scenarios(),
    ]
    return found


def _lost_words_in_pauses(notice: str) -> list[Scenario]:
    """Pauses just over the VAD's silence, and handoffs, during protected speech."""
    return [
        Scenario(
            name="lost_words/pause_over_protected_say",
            family="lost_words",
            description=(
                "Over a protected announcement the caller says something, pauses just over the "
                "VAD's end-of-speech silence, and speaks again (found by the fuzzer)."
            ),
            agent=agents.greeting_agent(protected=True, text=notice),
            utterances=(
                Utterance(4.0, 4.7, "is the terrace open"),
                Utterance(5.35, 6.0, "tonight please"),
            ),
            # 0.55 s is the VAD's silence: a shorter pause makes one speech window
            sweep=Sweep(utterance=1, start=5.3, stop=5.8, step=0.05),
        ),
        Scenario(
            name="lost_words/pause_over_hold_message",
            family="lost_words",
            description=(
                "Over a tool's protected hold message the caller says something, pauses just "
                "over the VAD's end-of-speech silence, and speaks again (found by the fuzzer)."
            ),
            agent=agents.booking_agent("protected_say", work_seconds=4.4),
            utterances=(
                dataclasses.replace(_ASK_BOOKING, reply_within=12.0),
                # answered with the next utterance: 0.65 s pause, 1.3 s of speech, 1.5 x 1.2 s
                Utterance(4.9, 5.9, "for four people outside", reply_within=0.65 + 1.3 + 1.8),
                Utterance(6.55, 7.85, "near the window if possible"),
            ),
            llm=(_BOOK, _BOOKED),
            duration=22.0,
            sweep=Sweep(utterance=2, start=6.5, stop=7.0, step=0.05),
        ),
        Scenario(
            name="lost_words/handoff_during_protected_hold",
            family="lost_words",
            description=(
                "A transfer tool says a long protected message and hands the call to the "
                "manager 1.5 s into it; the caller talks over the message."
            ),
            agent=agents.protected_handoff_agent(delay_s=1.5),
            utterances=(
                Utterance(1.0, 2.4, "let me talk to the manager", expect_reply=False),
                Utterance(
                    3.1, 5.4, "my order number is twelve", reply_within=_AFTER_TRANSFER_BOUND
                ),
            ),
            llm=(
                LLMRule(
                    when_user_says="manager",
                    tool_calls=(ToolCallScript("transfer_to_manager"),),
                ),
            ),
            duration=20.0,
            sweep=Sweep(utterance=1, start=3.0, stop=6.0, step=0.25),
        ),
        Scenario(
            name="lost_words/protected_filler",
            family="lost_words",
            description=(
                "A protected filler from on_user_turn_completed plays while the caller adds "
                "to their request."
            ),
            agent=agents.filler_agent,
            utterances=(
                # the filler is heard first, so the real answer comes after it
                Utterance(1.0, 2.5, "what is on the menu", reply_within=6.0),
                Utterance(3.3, 4.8, "and any vegan options"),
            ),
        ),
    ]


def _stuck_and_deadlock() -> list[Scenario]:
    found = []
    faults: tuple[VADFaultMode, ...] = ("stuck", "dead", "no_end_of_speech")
    for mode in faults:
        found.append(
            Scenario(
                name=f"vad/{mode}_plain_agent",
                family="vad",
                description=f"The VAD fails ({mode}) on a plain agent with no tools.",
                agent=agents.plain_agent,
                utterances=(Utterance(1.0, 2.5, "do you have parking"),),
                vad_fault=VADFault(mode=mode, utterance=0),
                reply_bound=_VAD_FAULT_BOUND,
            )
        )
    found.extend(vad_fault_in_handoff_scenarios())
    found.append(
        Scenario(
            name="deadlock/aclose_inside_tool",
            family="deadlock",
            description="A tool awaits session.aclose() from inside itself.",
            agent=agents.closing_tool_agent,
            utterances=(_GOODBYE,),
            llm=(_HANG_UP,),
            farewell=agents.FAREWELL,
        )
    )
    return found


def _stalls() -> list[Scenario]:
    menu = (
        "Tonight we have a roast chicken with lemon, a mushroom risotto, a grilled sea bass with "
        "fennel, and a chocolate tart for dessert."
    )
    return [
        Scenario(
            name="stall/llm_hangs",
            family="stall",
            description=(
                "The LLM provider accepts the request for the caller's question and never "
                "answers: the agent sits in 'thinking' with nothing to say."
            ),
            agent=agents.plain_agent,
            utterances=(Utterance(1.0, 2.5, "do you have parking"),),
            llm=(
                LLMRule(
                    when_user_says="parking", text="Yes, we have free parking.", hangs_before=5.0
                ),
            ),
            reply_bound=_THINKING_BOUND,
        ),
        Scenario(
            name="stall/lost_playout_report",
            family="stall",
            description=(
                "The caller interrupts a long reply; the audio sink stops playing but never "
                "reports the cleared playout, so livekit waits for it."
            ),
            agent=agents.plain_agent,
            utterances=(
                # its answer is the long reply the caller cuts on purpose
                Utterance(1.0, 2.5, "what is on the menu tonight", expect_reply=False),
                Utterance(5.0, 6.2, "stop how much is the wine"),
            ),
            llm=(LLMRule(when_user_says="menu", text=menu),),
            lost_playout_report=True,
        ),
        Scenario(
            name="stall/reply_waits_for_noise",
            family="stall",
            description=(
                "A TV starts on the caller's side while a tool works: the VAD hears speech with "
                "no words in it, and the tool's reply waits for a silence that does not come."
            ),
            agent=agents.booking_agent("plain", work_seconds=2.0),
            utterances=(dataclasses.replace(_ASK_BOOKING, reply_within=_NOISE_BOUND),),
            llm=(_BOOK, _BOOKED),
            noise=(NoiseWindow(4.5, 14.0),),
        ),
        Scenario(
            name="stall/question_under_hold_music",
            family="stall",
            description=(
                "Hold music plays under the caller's question and goes on: the STT has the "
                "question, but the VAD hears the music as speech and never ends the turn."
            ),
            agent=agents.plain_agent,
            utterances=(_OPEN_QUESTION,),
            llm=(_OPEN_ANSWER,),
            noise=(NoiseWindow(1.0, 25.0),),
            duration=30.0,
        ),
    ]


def _controls() -> list[Scenario]:
    return [
        Scenario(
            name="control/noise_stops_after_question",
            family="control",
            description=(
                "Music plays under the caller's question and stops 0.9 s after it: the VAD "
                "ends the turn itself, and nothing is cut short."
            ),
            agent=agents.plain_agent,
            utterances=(_OPEN_QUESTION,),
            llm=(_OPEN_ANSWER,),
            noise=(NoiseWindow(1.0, 5.5),),
            duration=12.0,
            control=True,
        ),
        Scenario(
            name="control/speech_at_end_of_reply",
            family="control",
            description="The caller speaks just as the agent's reply ends.",
            agent=agents.plain_agent,
            utterances=(
                Utterance(1.0, 2.5, "what time is it"),
                Utterance(5.2, 6.5, "thanks a lot"),
            ),
            control=True,
        ),
        Scenario(
            name="control/interrupt_tool_reply_generation",
            family="control",
            description="The caller interrupts while the tool reply is being generated.",
            agent=agents.booking_agent("plain", work_seconds=1.0),
            utterances=(_ASK_BOOKING, Utterance(4.9, 6.2, "sorry for four people")),
            llm=(_BOOK, LLMRule(text="Your table is booked.", after_tool="book_table", ttft=1.5)),
            control=True,
        ),
        Scenario(
            name="control/real_vad_two_turns",
            family="control",
            description="Two turns of real speech heard by livekit's embedded Silero VAD.",
            agent=agents.plain_agent,
            utterances=(
                Utterance.recorded(1.0, "table_for_two"),
                Utterance.recorded(8.0, "thank_you"),
            ),
            vad="silero",
            control=True,
        ),
        Scenario(
            name="control/end_call_farewell_heard",
            family="control",
            description="The caller says goodbye and listens to the whole farewell: hang up.",
            agent=agents.end_call_agent(farewell_protected=False, shutdown="job"),
            utterances=(_GOODBYE,),
            llm=(_BYE,),
            farewell=agents.FAREWELL,
            control=True,
        ),
        Scenario(
            name="control/long_monologue",
            family="control",
            description="The caller talks for 20 s without a pause: nobody cuts them off.",
            agent=agents.plain_agent,
            utterances=(Utterance(1.0, 21.0, _MONOLOGUE),),
            llm=(LLMRule(when_user_says="vegetarian", text="Noted, a table for twelve."),),
            duration=28.0,
            control=True,
        ),
        Scenario(
            name="control/long_tool_with_filler",
            family="control",
            description="A 12 s tool keeps the caller company with filler speech.",
            agent=agents.filler_tool_agent(work_seconds=12.0, filler_every_s=4.0),
            utterances=(dataclasses.replace(_ASK_BOOKING, reply_within=16.0),),
            llm=(_BOOK, _BOOKED),
            duration=24.0,
            control=True,
        ),
        Scenario(
            name="control/two_turns",
            family="control",
            description="Two ordinary turns with a pause between them.",
            agent=agents.plain_agent,
            utterances=(
                Utterance(1.0, 2.5, "do you have a terrace"),
                Utterance(7.0, 8.0, "great thanks"),
            ),
            control=True,
        ),
    ]


CATALOG: tuple[Scenario, ...] = (
    *_tool_gap(),
    *fuzz_found_scenarios(),
    *long_talker_scenarios(),
    *end_call_scenarios(),
    *_lost_words(),
    *_stuck_and_deadlock(),
    *_stalls(),
    *provider_fault_scenarios(),
    *workflow_scenarios(),
    *realtime_scenarios(),
    *_controls(),
    *fuzz_found_controls(),
    *workflow_controls(),
    *realtime_controls(),
    # last: real speech shares one recognizer, whose adaptation follows the catalog order
    *turn_handling_scenarios(),
    *turn_handling_controls(),
)


def scenarios() -> tuple[Scenario, ...]:
    """The whole catalog, in display order."""
    return CATALOG
