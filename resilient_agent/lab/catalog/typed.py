"""The catalog's text typed over protected speech with a reply queued behind it.

RoomIO's default text input interrupts before it asks for a reply. When the current speech is
protected (a filler said from ``on_user_turn_completed``), livekit refuses that interrupt and
leaves the speeches queued behind it as they are: the reply to the caller's earlier voice turn,
made without the typed words, plays before the typed message is answered (found by the fuzzer);
and words said over the filler before the message was typed are answered after its reply.
"""

from __future__ import annotations

from ...testing import Scenario, Typed, Utterance
from . import agents

__all__ = ["typed_over_queued_reply_scenarios"]

# The lab's clock (see the catalog): the VAD ends speech 0.55 s after the caller stops and
# livekit commits the turn 0.5 s later; TTS speaks 15 characters a second; an answer takes 1.5
# times the 1.2 s no-race latency. A message typed over the protected filler is answered once
# the filler is over: at worst the whole filler, then the answer.
_TURN_S = 0.55 + 0.5
_FILLER_S = len(agents.FILLER) / 15
_AFTER_FILLER_BOUND = _FILLER_S + 1.5 * 1.2
# Words said over the first filler and on past it (livekit drops the reply to the first words
# when the caller goes on): answered after the second filler.
_GOES_ON_BOUND = 12.0


def typed_over_queued_reply_scenarios() -> list[Scenario]:
    """Text typed over a protected filler while a reply to a voice turn waits behind it."""
    return [
        _typed_over_filler_with_reply_queued(),
        _typed_while_talking_over_filler(),
        _typed_after_words_over_filler(),
    ]


def _typed_over_filler_with_reply_queued() -> Scenario:
    # shrunk from fuzz/7-1621: filler_agent, four utterances back to back (1.0-8.5 s, one long
    # question), Typed(9.74, 'any quiet corner seats') -> typed message answered after 9.97 s
    return Scenario(
        name="lost_words/typed_over_filler_with_reply_queued",
        family="lost_words",
        description=(
            "The caller asks a long question; while the protected filler plays, with the reply "
            "to the question queued behind it, they type a chat message (found by the fuzzer)."
        ),
        agent=agents.filler_agent,
        utterances=(
            Utterance(
                1.0,
                4.0,
                "what is on the menu tonight and do you have anything without nuts",
                # answered with the typed message, which has the question in its context
                reply_within=_TURN_S + _AFTER_FILLER_BOUND,
            ),
        ),
        # the filler plays from about 5.2 s to 7.7 s
        typed=(Typed(6.0, "any quiet corner seats", reply_within=_AFTER_FILLER_BOUND),),
        duration=16.0,
    )


def _typed_while_talking_over_filler() -> Scenario:
    # shrunk from fuzz/2026-1670: filler_agent, (1.0-2.5 'what is on the menu'), (5.0-7.0,
    # 7.0-9.0 five and four more words), (9.7-11.0 'quartz jungle tomato'),
    # Typed(10.39, 'any quiet corner seats') -> utterance 4 answered after 9.63 s
    return Scenario(
        name="lost_words/typed_while_talking_over_filler",
        family="lost_words",
        description=(
            "The caller talks over a protected filler, with the reply to their earlier words "
            "queued behind it, and types a chat message while still talking (found by the "
            "fuzzer)."
        ),
        agent=agents.filler_agent,
        utterances=(
            # the caller goes on past the first filler: these are answered together, once they
            # stop and the second filler is over
            Utterance(1.0, 2.5, "what is on the menu", reply_within=_GOES_ON_BOUND),
            Utterance(
                5.0, 7.0, "and do you have anything without nuts", reply_within=_GOES_ON_BOUND
            ),
            Utterance(7.0, 9.0, "or without dairy for my daughter", reply_within=_GOES_ON_BOUND),
            # said over the second filler, which waits for the caller to stop (0.55 s of VAD
            # silence): the typed message, answered first, was sent before these words were
            # heard, and its answer is heard before theirs
            Utterance(
                9.7,
                11.0,
                "and a high chair",
                reply_within=0.55 + _AFTER_FILLER_BOUND + len("Sure: any quiet corner seats.") / 15,
            ),
        ),
        # typed while the caller still talks over the second filler
        typed=(
            Typed(10.4, "any quiet corner seats", reply_within=0.6 + 0.55 + _AFTER_FILLER_BOUND),
        ),
        duration=24.0,
    )


def _typed_after_words_over_filler() -> Scenario:
    # what the fix of the two above left: words said over the filler, pending, were answered
    # only after the typed message's reply (a reply of their own, 6.1 s after the caller stopped)
    return Scenario(
        name="lost_words/typed_after_words_over_filler",
        family="lost_words",
        description=(
            "The caller adds to their question over the protected filler, stops, and types a "
            "chat message before the filler ends."
        ),
        agent=agents.filler_agent,
        utterances=(
            Utterance(1.0, 2.5, "what is on the menu", reply_within=_TURN_S + _AFTER_FILLER_BOUND),
            # heard after the filler, with the typed message: one reply takes in both
            Utterance(3.3, 4.8, "and any vegan options", reply_within=_AFTER_FILLER_BOUND),
        ),
        # the filler plays from about 3.2 s to 5.7 s
        typed=(
            Typed(
                5.45,
                "is there a quiet table in the corner near the window for two",
                reply_within=_AFTER_FILLER_BOUND,
            ),
        ),
        duration=18.0,
    )
