"""The catalog's deliberate cut-ins: livekit's ``user_turn_limit``, and an app's own.

With ``turn_handling={"user_turn_limit": {"max_words": ...}}`` livekit calls
``Agent.on_user_turn_exceeded`` once a caller has said too many words, and its default reply cuts
in over them, uninterruptible. The cut-in is the app's choice and must play exactly as on
``Agent``; the race it opens is livekit's: whatever the caller says over it is withheld from the
STT and dropped. The same holds for a protected announcement the app plays inside
``resilient_agent.cut_in()``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

from livekit.agents import Agent

from ... import cut_in
from ...testing import LLMRule, Scenario, Utterance
from ...testing.scenario import AgentFactory
from . import agents

__all__ = ["CUT_IN_LINE", "turn_handling_controls", "turn_handling_scenarios"]

MAX_WORDS = 15
CUT_IN_LINE = "Sorry to cut in, let me help with that."
ANNOUNCEMENT = "Excuse me, our kitchen closes in ten minutes."
# livekit asks for the cut-in in the instructions of its generate_reply
_CUT_IN = LLMRule(when_instructed="speaking too long", text=CUT_IN_LINE)
_TURN_LIMIT: Mapping[str, object] = MappingProxyType({"user_turn_limit": {"max_words": MAX_WORDS}})

# 22 words in two sentences (sentences the catalog already has: the real-speech recognizer's
# domain is the catalog's sentences): livekit's limit is reached at the second final (5.5 s)
_LONG_START = (
    Utterance(
        1.0,
        3.0,
        "what is on the menu tonight and do you have anything without nuts",
        expect_reply=False,
    ),
    Utterance(3.3, 5.3, "I would like a table for four people tonight", expect_reply=False),
)
# said over the cut-in (6.15 s to 8.77 s), answered once it played: the VAD's end of speech, the
# recovery of the withheld audio and an answer
_OVER_CUT_IN = Utterance(5.6, 7.6, "wait actually how long does a refund take", reply_within=4.0)


def handed_to_plain_agent(base: type[Agent]) -> Agent:
    """A front desk on ``base`` that hands the call at once to livekit's plain ``Agent``."""

    class FrontDesk(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=agents.INSTRUCTIONS)

        async def on_enter(self) -> None:
            # livekit switches activities once this agent's start is over
            self._handing_over = asyncio.create_task(self._hand_over())

        async def _hand_over(self) -> None:
            await asyncio.sleep(0.2)
            self.session.update_agent(Agent(instructions=agents.INSTRUCTIONS))

    return FrontDesk()


def announcing_agent(*, at_s: float, marked: bool = True) -> AgentFactory:
    """An agent that plays a protected announcement ``at_s`` into the call, a cut-in if marked."""

    def build(base: type[Agent]) -> Agent:
        class Announcer(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=agents.INSTRUCTIONS)
                self._announcement: asyncio.Task[None] | None = None

            async def on_enter(self) -> None:
                self._announcement = asyncio.create_task(self._announce())

            async def _announce(self) -> None:
                await asyncio.sleep(at_s)
                if marked:
                    with cut_in():
                        self.session.say(ANNOUNCEMENT, allow_interruptions=False)
                else:
                    self.session.say(ANNOUNCEMENT, allow_interruptions=False)

        return Announcer()

    return build


def turn_handling_scenarios() -> list[Scenario]:
    """Words said over a deliberate cut-in: dropped on ``Agent``, answered on ``ResilientAgent``."""
    over_cut_in = Scenario(
        name="turn_limit/words_over_cut_in",
        family="turn_limit",
        description=(
            f"After {MAX_WORDS} words livekit's user_turn_limit cuts in over the caller "
            "(5.5 s), uninterruptible, as the app configured; the caller goes on talking "
            "over it, and those words must still be answered once it played."
        ),
        agent=agents.plain_agent,
        utterances=(*_LONG_START, _OVER_CUT_IN),
        llm=(_CUT_IN,),
        session_options=dict(_TURN_LIMIT),
        duration=16.0,
        # the cut-in talks over the caller on purpose
        talk_over_tolerance=None,
    )
    return [
        over_cut_in,
        dataclasses.replace(
            over_cut_in,
            name="turn_limit/words_over_cut_in_on_plain_agent",
            description=(
                "The same cut-in on livekit's plain Agent the call was handed to at once: "
                "the words said over it must still be answered."
            ),
            agent=handed_to_plain_agent,
        ),
        Scenario(
            name="turn_limit/words_over_app_cut_in",
            family="turn_limit",
            description=(
                "The app plays a protected announcement inside cut_in() at 3 s while the caller "
                "talks from 2 s to 6 s: it plays over them, and their words are answered after."
            ),
            agent=announcing_agent(at_s=3.0),
            utterances=(
                Utterance(2.0, 6.0, "do you have a table for two tonight", reply_within=4.0),
            ),
            duration=14.0,
            talk_over_tolerance=None,
        ),
    ]


def turn_handling_controls() -> list[Scenario]:
    """A race-free cut-in: the caller stops as livekit cuts in, and the call is Agent's call."""
    return [
        Scenario(
            name="control/turn_limit_cut_in",
            family="control",
            description=(
                f"The caller says {MAX_WORDS}+ words and stops; livekit's user_turn_limit cuts "
                "in as the VAD's end of speech is still due."
            ),
            agent=agents.plain_agent,
            utterances=(
                _LONG_START[0],
                Utterance(3.3, 5.3, _LONG_START[1].text),
            ),
            llm=(_CUT_IN,),
            session_options=dict(_TURN_LIMIT),
            duration=12.0,
            control=True,
        ),
    ]
