"""The catalog's ``workflows`` family: the app hands the call to code not built on the base class.

In every scenario the app's own agent is built on the base class under test, but the code it
hands control to is not rebased: livekit's workflow tasks as they are (``GetEmailTask``,
``GetAddressTask``, ``TaskGroup``), and the app's own ``AgentTask`` and handoff targets written
on plain ``livekit.agents.Agent`` (see :mod:`.agents.workflows`). Each race has a control of the
same shape without the race, which must pass on every agent.

Beside the usual contracts, :attr:`Scenario.tools_complete` checks that what the caller said
reached the task acting on it: an email or an address read back to the caller and confirmed by
them (``GetEmailTask`` skips both for typed input, ``input_modality="text"``, and saves it as it
came), the account looked up, the booking made.

The lab's clock (see the catalog): the VAD ends speech 0.55 s after the caller stops, the
scripted LLM answers after 0.3 s, TTS speaks 15 characters a second, and an answer takes 1.5
times its no-race latency: 1.2 s for a plain answer, 1.7 s for one that goes through a tool
first (a read-back comes after ``update_email_address``).
"""

from __future__ import annotations

from ...testing import LLMRule, Scenario, Sweep, ToolCallScript, Utterance
from . import agents
from .agents import workflows as flows

__all__ = ["workflow_controls", "workflow_scenarios"]

_ANSWER_S = 1.5 * 1.2
_TOOL_ANSWER_S = 1.5 * 1.7
_VAD_END_S = 0.55


def _s(text: str) -> float:
    """Seconds the scripted TTS takes to say ``text``."""
    return len(text) / 15


_EMAIL_QUESTION = "What is your email address?"
_LONG_EMAIL_QUESTION = (
    "Could you please tell me the email address you would like us to use for your account?"
)
_ADDRESS_QUESTION = "What is your postal address?"
_EMAIL_READ_BACK = "I have jane at example dot com, is that right?"
_ADDRESS_READ_BACK = "I have twelve Baker Street, London, is that right?"
_SAVED = "Thanks, your details are saved."

_ASK_DETAILS = Utterance(1.0, 2.5, "please update my contact details", expect_reply=False)
_EMAIL = "my email is jane at example dot com"
_ADDRESS = "I live at twelve baker street london"
_EMAIL_CONFIRMED = "yes the email is right"
_ADDRESS_CONFIRMED = "yes the address is right"
# TaskGroup summarizes its tasks' turns into one message before the app's tool returns, so the
# answer to the last confirmation no longer carries its words: tools_complete judges it. It comes
# 5.5 s after the address, once its 3.3 s read-back (5.0 s after the address) has played out.
_GROUP_DONE = Utterance(0.0, 1.2, _ADDRESS_CONFIRMED, expect_reply=False)

# Rules match in order: a task's opening request is answered by its question unless the caller
# already gave what it asks for (GetEmailTask's on_enter: "If the user already stated one
# earlier in this conversation, record it with update_email_address instead of asking again").
_DETAILS_RULES: tuple[LLMRule, ...] = (
    LLMRule(
        when_user_says="Conversation to summarize",  # TaskGroup's summary of its tasks
        text="The caller gave and confirmed their email and postal address.",
    ),
    LLMRule(
        when_user_says="example",
        tool_calls=(ToolCallScript("update_email_address", {"email": "jane@example.com"}),),
    ),
    LLMRule(
        when_user_says="baker",
        tool_calls=(
            ToolCallScript(
                "update_address",
                {
                    "street_address": "12 Baker Street",
                    "unit_number": "",
                    "locality": "London",
                    "country": "United Kingdom",
                },
            ),
        ),
    ),
    LLMRule(when_instructed="Ask the user for their email", text=_EMAIL_QUESTION),
    LLMRule(when_instructed="Ask the user for their address", text=_ADDRESS_QUESTION),
    LLMRule(after_tool="update_email_address", text=_EMAIL_READ_BACK),
    LLMRule(after_tool="update_address", text=_ADDRESS_READ_BACK),
    LLMRule(when_user_says="email is right", tool_calls=(ToolCallScript("confirm_email_address"),)),
    LLMRule(when_user_says="address is right", tool_calls=(ToolCallScript("confirm_address"),)),
    LLMRule(when_user_says="details", tool_calls=(ToolCallScript("collect_details"),)),
    LLMRule(after_tool="collect_details", text=_SAVED),
)
_EMAIL_TOOLS = ("update_email_address", "confirm_email_address", "collect_details")
_ADDRESS_TOOLS = ("update_address", "confirm_address", "collect_details")
_GROUP_TOOLS = (
    "update_email_address",
    "confirm_email_address",
    "update_address",
    "confirm_address",
    "collect_details",
)

# The app's hold line starts at 3.7 s (turn end, LLM, tool call) and plays 3.4 s.
_FILE_LINE_END = 3.7 + _s(flows.FILE_LINE)


def workflow_scenarios() -> list[Scenario]:
    """The family's races, in display order."""
    return [
        *_words_over_hold_before_task(),
        _words_over_line_in_app_task(),
        _caller_talks_during_app_task_tool(),
        *_words_over_line_after_task(),
        _task_prompt_over_speaking_caller(),
        _plain_target_farewell_interrupted(),
        _plain_target_tool_gap(),
        _email_over_protected_task_question(),
    ]


def workflow_controls() -> list[Scenario]:
    """The same shapes without the race: they must pass on every agent."""
    return [
        *_details_controls(),
        _app_task_control(),
        _app_task_long_tool_control(),
        _after_task_control(),
        _task_prompt_control(),
        _plain_target_farewell_heard(),
        _plain_target_tool_control(),
        _protected_task_question_control(),
    ]


# -- 1. words over the app's protected hold line, then livekit's task ---------------------------


# The caller gives their email or address over the hold line (3.7-7.1 s): 4.2-6.4 s as written,
# from 3.8 s across the sweep. It is read back once the line and the task's question played: the
# bound holds from the sweep's earliest end (6.0 s) on.
_OVER_HOLD_SWEEP = Sweep(utterance=1, start=3.8, stop=5.0, step=0.2)
_EARLIEST_END = _OVER_HOLD_SWEEP.start + 2.2


def _over_hold(text: str, question: str) -> Utterance:
    bound = _FILE_LINE_END - _EARLIEST_END + _s(question) + _TOOL_ANSWER_S
    return Utterance(4.2, 6.4, text, reply_within=bound)


def _words_over_hold_before_task() -> list[Scenario]:
    # the email's read-back ends by 13.1 s
    return [
        Scenario(
            name="workflows/email_over_hold_before_email_task",
            family="workflows",
            description=(
                "The app's tool says a protected hold line, then awaits livekit's GetEmailTask; "
                "the caller gives their email over the hold line: the task must get it, read "
                "it back and have it confirmed."
            ),
            agent=flows.before_workflow_agent("email"),
            utterances=(
                _ASK_DETAILS,
                _over_hold(_EMAIL, _EMAIL_QUESTION),
                Utterance(13.8, 15.0, _EMAIL_CONFIRMED),
            ),
            llm=_DETAILS_RULES,
            tools_complete=_EMAIL_TOOLS,
            duration=24.0,
            sweep=_OVER_HOLD_SWEEP,
        ),
        Scenario(
            name="workflows/address_over_hold_before_address_task",
            family="workflows",
            description=(
                "The app's tool says a protected hold line, then awaits livekit's "
                "GetAddressTask; the caller gives their address over the hold line: the task "
                "must get it, read it back and have it confirmed."
            ),
            agent=flows.before_workflow_agent("address"),
            utterances=(
                _ASK_DETAILS,
                _over_hold(_ADDRESS, _ADDRESS_QUESTION),
                Utterance(14.0, 15.2, _ADDRESS_CONFIRMED),
            ),
            llm=_DETAILS_RULES,
            tools_complete=_ADDRESS_TOOLS,
            duration=24.0,
        ),
        Scenario(
            name="workflows/email_over_hold_before_task_group",
            family="workflows",
            description=(
                "The app's tool says a protected hold line, then awaits a TaskGroup of "
                "GetEmailTask and GetAddressTask; the caller gives their email over the hold "
                "line: the email task must get it and have it confirmed, then the address task "
                "runs."
            ),
            agent=flows.before_workflow_agent("group"),
            utterances=(
                _ASK_DETAILS,
                _over_hold(_EMAIL, _EMAIL_QUESTION),
                Utterance(13.8, 15.0, _EMAIL_CONFIRMED),
                Utterance(18.5, 20.5, _ADDRESS),
                _GROUP_DONE.shifted(26.0),
            ),
            llm=_DETAILS_RULES,
            tools_complete=_GROUP_TOOLS,
            duration=34.0,
        ),
    ]


def _details_controls() -> list[Scenario]:
    # each confirmation starts 0.2 s before its read-back ends: livekit takes 0.5 s of speech
    # over the agent for an interruption, and the margin holds under the explorer's lateness
    return [
        Scenario(
            name="workflows/control_email_task",
            family="workflows",
            description=(
                "The app's tool says a protected hold line and awaits GetEmailTask; the caller "
                "gives their email once asked, hears it read back and confirms it."
            ),
            agent=flows.before_workflow_agent("email"),
            utterances=(
                _ASK_DETAILS,
                Utterance(10.0, 12.2, _EMAIL, reply_within=_TOOL_ANSWER_S),
                Utterance(16.8, 18.0, _EMAIL_CONFIRMED),
            ),
            llm=_DETAILS_RULES,
            tools_complete=_EMAIL_TOOLS,
            duration=26.0,
            control=True,
        ),
        Scenario(
            name="workflows/control_address_task",
            family="workflows",
            description=(
                "The app's tool says a protected hold line and awaits GetAddressTask; the "
                "caller gives their address once asked, hears it read back and confirms it."
            ),
            agent=flows.before_workflow_agent("address"),
            utterances=(
                _ASK_DETAILS,
                Utterance(10.0, 12.2, _ADDRESS, reply_within=_TOOL_ANSWER_S),
                Utterance(17.0, 18.2, _ADDRESS_CONFIRMED),
            ),
            llm=_DETAILS_RULES,
            tools_complete=_ADDRESS_TOOLS,
            duration=26.0,
            control=True,
        ),
        Scenario(
            name="workflows/control_task_group",
            family="workflows",
            description=(
                "The app's tool says a protected hold line and awaits a TaskGroup of "
                "GetEmailTask and GetAddressTask; the caller answers each once asked and "
                "confirms each read-back."
            ),
            agent=flows.before_workflow_agent("group"),
            utterances=(
                _ASK_DETAILS,
                Utterance(10.0, 12.2, _EMAIL, reply_within=_TOOL_ANSWER_S),
                Utterance(16.8, 18.0, _EMAIL_CONFIRMED),
                Utterance(21.3, 23.3, _ADDRESS, reply_within=_TOOL_ANSWER_S),
                _GROUP_DONE.shifted(28.8),
            ),
            llm=_DETAILS_RULES,
            tools_complete=_GROUP_TOOLS,
            duration=36.0,
            control=True,
        ),
    ]


# -- 2. words over a protected line inside the app's own plain AgentTask ------------------------

_ACCOUNT_RULES = (
    LLMRule(when_user_says="check", tool_calls=(ToolCallScript("verify_account"),)),
    LLMRule(when_instructed="account number", text=flows.ACCOUNT_PROMPT),
    LLMRule(
        when_user_says="seven",
        tool_calls=(ToolCallScript("look_up_account", {"number": "4471"}),),
    ),
    LLMRule(after_tool="verify_account", text="Your account is verified."),
    LLMRule(when_user_says="old name", text="Noted, the account may be under your old name."),
)
_ACCOUNT_TOOLS = ("look_up_account", "verify_account")
_ASK_VERIFY = Utterance(1.0, 2.5, "please check my account", expect_reply=False)
# the number is answered once the account was looked up: turn end and LLM (1.05 s), the
# protected line, 1.5 s of work, and the verified answer
_NUMBER = Utterance(
    6.0,
    7.5,
    "it is four four seven one",
    reply_within=1.05 + _s(flows.ACCOUNT_LINE) + 1.5 + _ANSWER_S,
)
# the lookup's protected line plays from 8.7 s
_ACCOUNT_LINE_END = 8.7 + _s(flows.ACCOUNT_LINE)


def _words_over_line_in_app_task() -> Scenario:
    return Scenario(
        name="workflows/words_over_line_in_app_task",
        family="workflows",
        description=(
            "The app's tool awaits its own AgentTask, written on plain AgentTask, whose "
            "look-up tool says a protected line; the caller adds something over the line."
        ),
        agent=flows.account_task_agent(work_seconds=1.5),
        utterances=(
            _ASK_VERIFY,
            _NUMBER,
            # answered once the line ended: it ends at most 1.5 s after the caller across
            # the sweep (their earliest end is 11.0 s)
            Utterance(
                9.8,
                11.8,
                "it may be under my old name",
                reply_within=_ACCOUNT_LINE_END - 11.0 + _ANSWER_S,
            ),
        ),
        llm=_ACCOUNT_RULES,
        tools_complete=_ACCOUNT_TOOLS,
        duration=24.0,
        sweep=Sweep(utterance=2, start=9.0, stop=11.0, step=0.25),
    )


def _app_task_control() -> Scenario:
    return Scenario(
        name="workflows/control_app_task",
        family="workflows",
        description=(
            "The app's tool awaits its own plain AgentTask, whose look-up tool says a "
            "protected line; the caller speaks only once the account is verified."
        ),
        agent=flows.account_task_agent(work_seconds=1.5),
        utterances=(_ASK_VERIFY, _NUMBER, Utterance(17.0, 19.0, "it may be under my old name")),
        llm=_ACCOUNT_RULES,
        tools_complete=_ACCOUNT_TOOLS,
        duration=26.0,
        control=True,
    )


# the look-up's line plays 8.7-12.5 s, then 9 s of work: the account is verified at 22.2 s
_SLOW_NUMBER = Utterance(6.0, 7.5, "it is four four seven one", reply_within=16.0)


def _caller_talks_during_app_task_tool() -> Scenario:
    return Scenario(
        name="workflows/caller_talks_during_app_task_tool",
        family="workflows",
        description=(
            "The app's own plain AgentTask runs a look-up tool with 9 s of work after its "
            "protected line; the caller asks something while it works, and the interruption "
            "waits for the tool."
        ),
        agent=flows.account_task_agent(work_seconds=9.0),
        utterances=(
            _ASK_VERIFY,
            _SLOW_NUMBER,
            Utterance(14.0, 16.0, "it may be under my old name"),
        ),
        llm=_ACCOUNT_RULES,
        tools_complete=_ACCOUNT_TOOLS,
        duration=32.0,
        sweep=Sweep(utterance=2, start=13.0, stop=19.0, step=0.5),
    )


def _app_task_long_tool_control() -> Scenario:
    return Scenario(
        name="workflows/control_app_task_long_tool",
        family="workflows",
        description=(
            "The app's own plain AgentTask runs a look-up tool with 9 s of work after its "
            "protected line; the caller waits for the account to be verified."
        ),
        agent=flows.account_task_agent(work_seconds=9.0),
        utterances=(
            _ASK_VERIFY,
            _SLOW_NUMBER,
            Utterance(25.0, 27.0, "it may be under my old name"),
        ),
        llm=_ACCOUNT_RULES,
        tools_complete=_ACCOUNT_TOOLS,
        duration=34.0,
        control=True,
    )


# -- 3. words over the app's protected line after livekit's task completed ----------------------

_RECEIPT = "and can you send me a receipt"
_RECEIPT_RULE = LLMRule(when_user_says="receipt", text="Yes, I will send you a receipt by email.")


def _email_turns() -> tuple[Utterance, ...]:
    # asked at 4.2 s (1.8 s), read back from 9.7 s (3.07 s)
    return (
        _ASK_DETAILS,
        Utterance(6.0, 8.0, _EMAIL, reply_within=_TOOL_ANSWER_S),
        Utterance(13.0, 14.0, _EMAIL_CONFIRMED, expect_reply=False),
    )


def _group_turns() -> tuple[Utterance, ...]:
    return (
        *_email_turns(),
        # asked at 15.7 s (1.87 s), read back from 20.7 s (3.33 s)
        Utterance(17.8, 19.8, _ADDRESS, reply_within=_TOOL_ANSWER_S),
        Utterance(24.5, 25.5, _ADDRESS_CONFIRMED, expect_reply=False),
    )


def _receipt_over_saving_line(line_start: float, said_at: float) -> Utterance:
    end = said_at + 2.0
    return Utterance(
        said_at, end, _RECEIPT, reply_within=line_start + _s(flows.SAVING_LINE) - end + _ANSWER_S
    )


def _words_over_line_after_task() -> list[Scenario]:
    # the confirmation completes the task at once; the app's saving line plays from then on
    return [
        Scenario(
            name="workflows/words_over_line_after_email_task",
            family="workflows",
            description=(
                "GetEmailTask completes and the app's tool says a protected line while it "
                "saves the email; the caller asks something over the line."
            ),
            agent=flows.after_workflow_agent("email", work_seconds=1.0),
            utterances=(*_email_turns(), _receipt_over_saving_line(15.2, 15.7)),
            llm=(*_DETAILS_RULES, _RECEIPT_RULE),
            tools_complete=_EMAIL_TOOLS,
            duration=28.0,
            # the line starts at 15.2 s: a caller who starts with it is held for (another race)
            sweep=Sweep(utterance=3, start=15.5, stop=18.0, step=0.25),
        ),
        Scenario(
            name="workflows/words_over_line_after_task_group",
            family="workflows",
            description=(
                "A TaskGroup of GetEmailTask and GetAddressTask completes and the app's tool "
                "says a protected line while it saves the details; the caller asks something "
                "over the line."
            ),
            agent=flows.after_workflow_agent("group", work_seconds=1.0),
            utterances=(*_group_turns(), _receipt_over_saving_line(27.2, 27.7)),
            llm=(*_DETAILS_RULES, _RECEIPT_RULE),
            tools_complete=_GROUP_TOOLS,
            duration=40.0,
        ),
    ]


def _after_task_control() -> Scenario:
    return Scenario(
        name="workflows/control_after_task_group",
        family="workflows",
        description=(
            "A TaskGroup of GetEmailTask and GetAddressTask completes, the app's tool says a "
            "protected line while it saves the details, and the caller asks something after."
        ),
        agent=flows.after_workflow_agent("group", work_seconds=1.0),
        utterances=(*_group_turns(), Utterance(35.0, 37.0, _RECEIPT)),
        llm=(*_DETAILS_RULES, _RECEIPT_RULE),
        tools_complete=_GROUP_TOOLS,
        duration=44.0,
        control=True,
    )


# -- 4. a plain AgentTask's protected prompt over a speaking caller ----------------------------

_SURVEY_RULES = (
    LLMRule(when_user_says="survey", tool_calls=(ToolCallScript("start_survey"),)),
    LLMRule(when_user_says="four", tool_calls=(ToolCallScript("record_rating", {"rating": "4"}),)),
    LLMRule(after_tool="start_survey", text="Thank you for rating us."),
    LLMRule(when_user_says="questions", text="Just the one question."),
)
_ASK_SURVEY = Utterance(1.0, 2.5, "sure I can do the survey", expect_reply=False)
_SURVEY_TOOLS = ("record_rating", "start_survey")


def _task_prompt_over_speaking_caller() -> Scenario:
    # the prompt would start at 3.7 s, 0.5 s into the caller's 3.2-5.0 s question
    return Scenario(
        name="workflows/task_prompt_over_speaking_caller",
        family="workflows",
        description=(
            "The app's tool awaits its own plain AgentTask, whose on_enter says a protected "
            "prompt while the caller is still talking."
        ),
        agent=flows.survey_task_agent,
        utterances=(
            _ASK_SURVEY,
            Utterance(
                3.2,
                5.0,
                "how many questions are there",
                reply_within=_VAD_END_S + _s(flows.SURVEY_PROMPT) + _ANSWER_S,
            ),
            Utterance(13.5, 14.5, "I would say four"),
        ),
        llm=_SURVEY_RULES,
        tools_complete=_SURVEY_TOOLS,
        duration=22.0,
        # before 3.1 s the VAD never ended the first turn: one long turn, no race
        sweep=Sweep(utterance=1, start=3.1, stop=4.0, step=0.1),
    )


def _task_prompt_control() -> Scenario:
    return Scenario(
        name="workflows/control_task_prompt",
        family="workflows",
        description=(
            "The app's tool awaits its own plain AgentTask, whose on_enter says a protected "
            "prompt; the caller answers once it ended."
        ),
        agent=flows.survey_task_agent,
        utterances=(_ASK_SURVEY, Utterance(8.5, 9.5, "I would say four")),
        llm=_SURVEY_RULES,
        tools_complete=_SURVEY_TOOLS,
        duration=18.0,
        control=True,
    )


# -- 5. a plain handoff target's farewell interrupted -------------------------------------------

_BILLING_RULES = (
    LLMRule(when_user_says="billing", tool_calls=(ToolCallScript("transfer_to_billing"),)),
    LLMRule(when_user_says="goodbye", tool_calls=(ToolCallScript("end_call"),)),
    LLMRule(when_user_says="refund", text="A refund takes five working days."),
)
_TO_BILLING = Utterance(1.0, 2.4, "put me through to billing", expect_reply=False)
_BILLING_GOODBYE = Utterance(4.0, 5.0, "okay goodbye", expect_reply=False)


def _plain_target_farewell_interrupted() -> Scenario:
    # the farewell plays 6.2-9.9 s; the question cuts it at 8.5 s
    return Scenario(
        name="workflows/plain_target_farewell_interrupted",
        family="workflows",
        description=(
            "The app hands the call to a billing desk written on plain Agent, whose end_call "
            "says a goodbye, sleeps and shuts the job down in finally; the caller interrupts "
            "the goodbye with a question."
        ),
        agent=flows.plain_end_call_desk_agent,
        utterances=(
            _TO_BILLING,
            _BILLING_GOODBYE,
            Utterance(8.0, 9.8, "wait actually how long does a refund take"),
        ),
        llm=_BILLING_RULES,
        farewell=agents.FAREWELL,
        duration=22.0,
    )


def _plain_target_farewell_heard() -> Scenario:
    return Scenario(
        name="workflows/control_plain_target_farewell_heard",
        family="workflows",
        description=(
            "The app hands the call to a billing desk written on plain Agent; the caller says "
            "goodbye and hears the whole farewell: hang up."
        ),
        agent=flows.plain_end_call_desk_agent,
        utterances=(_TO_BILLING, _BILLING_GOODBYE),
        llm=_BILLING_RULES,
        farewell=agents.FAREWELL,
        duration=20.0,
        control=True,
    )


# -- 6. a plain handoff target's tool in the tool gap ------------------------------------------

_BOOKING_RULES = (
    LLMRule(when_user_says="bookings", tool_calls=(ToolCallScript("transfer_to_bookings"),)),
    LLMRule(when_user_says="book", tool_calls=(ToolCallScript("book_table", {"time": "eight"}),)),
    LLMRule(after_tool="book_table", text="Your table is booked."),
)
_TO_BOOKINGS = Utterance(1.0, 2.4, "put me through to bookings", expect_reply=False)
_BOOK_TABLE = Utterance(4.0, 5.8, "please book a table for eight", reply_within=8.0)


def _plain_target_tool_gap() -> Scenario:
    # the LLM calls book_table at 6.35 s, the hold message starts at 7.0 s
    return Scenario(
        name="workflows/plain_target_tool_gap",
        family="workflows",
        description=(
            "The app hands the call to a booking desk written on plain Agent; the caller goes "
            "on talking in the gap between the LLM's call of its tool and the tool's protected "
            "hold message."
        ),
        agent=flows.plain_booking_desk_agent(work_seconds=2.0),
        utterances=(
            _TO_BOOKINGS,
            _BOOK_TABLE,
            Utterance(
                6.7,
                8.4,
                "actually make it nine instead",
                reply_within=_VAD_END_S + _s(agents.HOLD_MESSAGE) + _ANSWER_S,
            ),
        ),
        llm=_BOOKING_RULES,
        tools_complete=("book_table",),
        duration=22.0,
        # before 6.4 s the VAD never ended the booking turn: one long turn, no gap
        sweep=Sweep(utterance=2, start=6.4, stop=8.0, step=0.1),
    )


def _plain_target_tool_control() -> Scenario:
    return Scenario(
        name="workflows/control_plain_target_tool",
        family="workflows",
        description=(
            "The app hands the call to a booking desk written on plain Agent; the caller "
            "listens to its tool's hold message and hears the booking."
        ),
        agent=flows.plain_booking_desk_agent(work_seconds=2.0),
        utterances=(_TO_BOOKINGS, _BOOK_TABLE, Utterance(15.0, 16.0, "great thanks a lot")),
        llm=_BOOKING_RULES,
        tools_complete=("book_table",),
        duration=22.0,
        control=True,
    )


# -- 7. modality: an email recovered over the task's own protected question --------------------

# GetEmailTask(allow_interruptions=False) asks from 4.2 s for 5.67 s
_LONG_QUESTION_END = 4.2 + _s(_LONG_EMAIL_QUESTION)
_PROTECTED_QUESTION_RULES = (
    LLMRule(when_instructed="Ask the user for their email", text=_LONG_EMAIL_QUESTION),
    *_DETAILS_RULES,
)


def _email_over_protected_task_question() -> Scenario:
    sweep = Sweep(utterance=1, start=6.0, stop=9.0, step=0.25)
    # read back once the question ended: at most this long after the caller across the sweep
    question_after = _LONG_QUESTION_END - (sweep.start + 2.2)
    return Scenario(
        name="workflows/email_over_protected_task_question",
        family="workflows",
        description=(
            "The app awaits GetEmailTask(allow_interruptions=False); the caller gives their "
            "email over the end of its protected question: recovered, it must be read back "
            "and confirmed as live voice is, not saved as typed text."
        ),
        agent=flows.protected_email_task_agent,
        utterances=(
            _ASK_DETAILS,
            Utterance(7.0, 9.2, _EMAIL, reply_within=question_after + _TOOL_ANSWER_S),
            Utterance(16.0, 17.2, _EMAIL_CONFIRMED),
        ),
        llm=_PROTECTED_QUESTION_RULES,
        tools_complete=_EMAIL_TOOLS,
        duration=26.0,
        sweep=sweep,
    )


def _protected_task_question_control() -> Scenario:
    return Scenario(
        name="workflows/control_protected_task_question",
        family="workflows",
        description=(
            "The app awaits GetEmailTask(allow_interruptions=False); the caller gives their "
            "email once the question ended, hears it read back and confirms it."
        ),
        agent=flows.protected_email_task_agent,
        utterances=(
            _ASK_DETAILS,
            Utterance(10.5, 12.7, _EMAIL, reply_within=_TOOL_ANSWER_S),
            Utterance(18.0, 19.2, _EMAIL_CONFIRMED),
        ),
        llm=_PROTECTED_QUESTION_RULES,
        tools_complete=_EMAIL_TOOLS,
        duration=26.0,
        control=True,
    )
