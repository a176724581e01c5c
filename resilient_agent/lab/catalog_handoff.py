"""The catalog's handoff scenarios with typed text: a chat message while livekit hands over."""

from __future__ import annotations

from ..testing import LLMRule, Scenario, ToolCallScript, Typed, Utterance
from . import agents

__all__ = ["typed_during_handoff_scenarios"]

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
