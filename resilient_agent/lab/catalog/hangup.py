"""The catalog's hang-up families: end-call tools, livekit's EndCallTool, shutdown in finally."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ...testing import LLMRule, Scenario, Sweep, ToolCallScript, Utterance
from . import agents

__all__ = ["GOODBYE", "HANG_UP", "SAYS_BYE", "end_call_scenarios"]

SAYS_BYE = LLMRule(when_user_says="goodbye", tool_calls=(ToolCallScript("end_call"),))
HANG_UP = LLMRule(when_user_says="goodbye", tool_calls=(ToolCallScript("hang_up"),))
GOODBYE = Utterance(1.0, 2.2, "okay goodbye", expect_reply=False)


def _end_call() -> list[Scenario]:
    found = []
    question = "wait what time do you open tomorrow"
    for protected in (True, False):
        tag = "protected" if protected else "interruptible"
        found.append(
            Scenario(
                name=f"end_call/question_over_farewell_end_{tag}",
                family="end_call",
                description=(
                    "The caller asks a question over the end of the farewell; the tool sleeps, "
                    "then shuts the job down in finally."
                ),
                agent=agents.end_call_agent(farewell_protected=protected, shutdown="job"),
                utterances=(GOODBYE, Utterance(5.6, 7.4, question)),
                llm=(SAYS_BYE,),
                farewell=agents.FAREWELL,
                duration=20.0,
            )
        )
        found.append(
            Scenario(
                name=f"end_call/question_during_sleep_{tag}",
                family="end_call",
                description=(
                    "The farewell played; the caller asks a question while the tool sleeps "
                    "before shutting down."
                ),
                agent=agents.end_call_agent(
                    farewell_protected=protected, shutdown="job", sleep_seconds=7.0
                ),
                utterances=(GOODBYE, Utterance(8.0, 9.5, question)),
                llm=(SAYS_BYE,),
                farewell=agents.FAREWELL,
                duration=22.0,
                sweep=Sweep(utterance=1, start=7.0, stop=13.0, step=0.25),
            )
        )
    return found


# livekit's EndCallTool: the LLM calls end_call, and its tool reply is the goodbye (3.90-7.65 s)
_FAREWELL_REPLY = LLMRule(after_tool="end_call", text=agents.FAREWELL)
_REFUND = "wait actually how long does a refund take"
_SPEAK_AND_CALL = LLMRule(
    when_user_says="goodbye", text=agents.FAREWELL, tool_calls=(ToolCallScript("end_call"),)
)
_ANSWER_REFUND = LLMRule(when_user_says="refund", text="A refund takes five working days.")
# livekit's close waits this long for the caller's last transcript (2.0 s by default): set as a
# SIP app would, so the 1 s bound measures what the agent adds, not livekit's own wait
_QUICK_CLOSE: Mapping[str, float] = MappingProxyType({"session_close_transcript_timeout": 0.5})


def _livekit_end_call() -> list[Scenario]:
    def scenario(name: str, description: str, **kwargs: object) -> Scenario:
        options: dict[str, object] = {
            "family": "end_call",
            "agent": agents.livekit_end_call_agent,
            "llm": (SAYS_BYE, _FAREWELL_REPLY, _ANSWER_REFUND),
            "farewell": agents.FAREWELL,
            "session_options": dict(_QUICK_CLOSE),
            **kwargs,
        }
        return Scenario(name=name, description=description, **options)  # type: ignore[arg-type]

    return [
        scenario(
            "end_call/livekit_tool_question_over_goodbye",
            "livekit's EndCallTool; 1.1 s into its goodbye the caller asks a question.",
            utterances=(GOODBYE, Utterance(5.0, 7.0, _REFUND)),
            sweep=Sweep(utterance=1, start=4.0, stop=7.5, step=0.25),
        ),
        scenario(
            "end_call/livekit_tool_caller_speaks_after_goodbye",
            "livekit's EndCallTool; the caller speaks as soon as the goodbye has ended.",
            utterances=(GOODBYE, Utterance(7.7, 9.5, _REFUND)),
        ),
        scenario(
            "end_call/livekit_tool_goodbye_spoken_with_the_call",
            "livekit's EndCallTool(end_instructions=None): the model says goodbye while calling "
            "it, as a realtime model does; the caller asks over the goodbye.",
            agent=agents.livekit_end_call_agent_speaking,
            llm=(_SPEAK_AND_CALL, _ANSWER_REFUND),
            utterances=(GOODBYE, Utterance(4.5, 6.5, _REFUND)),
        ),
        scenario(
            "end_call/app_shutdown_from_farewell_callback",
            "The app hangs up from its farewell's done callback; the caller asks over it.",
            agent=agents.farewell_callback_agent,
            llm=(SAYS_BYE, _ANSWER_REFUND),
            utterances=(GOODBYE, Utterance(5.0, 7.0, _REFUND)),
        ),
        scenario(
            "control/livekit_tool_goodbye_heard",
            "livekit's EndCallTool; the goodbye is heard: the call ends whole within 1 s.",
            family="control",
            utterances=(GOODBYE,),
            hang_up_within=1.0,
            control=True,
        ),
        scenario(
            "control/caller_leaves_during_goodbye",
            "livekit's EndCallTool; the caller hangs up during the goodbye: the close goes on.",
            family="control",
            utterances=(GOODBYE,),
            caller_leaves_at=5.0,
            session_options={},
            control=True,
        ),
    ]


def _shutdown_in_finally() -> list[Scenario]:
    found = []
    for shutdown in ("job", "session"):
        found.append(
            Scenario(
                name=f"shutdown_finally/interrupted_farewell_{shutdown}",
                family="shutdown_finally",
                description=(
                    "The caller interrupts an interruptible farewell; the tool shuts down in "
                    f"finally ({shutdown} shutdown) anyway."
                ),
                agent=agents.end_call_agent(
                    farewell_protected=False, shutdown=shutdown, sleep_seconds=1.0
                ),
                utterances=(GOODBYE, Utterance(4.4, 6.0, "no wait one more question please")),
                llm=(SAYS_BYE,),
                farewell=agents.FAREWELL,
            )
        )
    return found


def end_call_scenarios() -> list[Scenario]:
    """The hang-up families, in catalog order."""
    return [*_end_call(), *_livekit_end_call(), *_shutdown_in_finally()]
