"""The dropped-turn answerer waits for livekit's turn delay on one timer (virtual time): it answers
when the delay has passed, looks again when woken sooner, and leaves nothing behind when stopped;
woken with no words pending and no delay running, it does not look at all (nothing to answer)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from resilient_agent.middleware.turn_keeper import Fragment, TurnKeeperOptions
from resilient_agent.middleware.turn_keeper.dropped_turns import DroppedTurnAnswerer, WhenToAnswer

from resilient_agent import ConversationState, MiddlewareContext
from resilient_agent._engine.pending_words import PendingWords
from resilient_agent.testing import run_virtual


class _Script:
    """Stands in for ``when_to_answer`` and ``answer``: words are due at ``due``, answered once."""

    def __init__(self, due: float) -> None:
        self.due: float | None = due
        self.looked_at: list[float] = []
        self.answered_at: list[float] = []

    def when_to_answer(self, _ctx: MiddlewareContext) -> WhenToAnswer:
        now = asyncio.get_running_loop().time()
        self.looked_at.append(round(now, 6))
        if self.due is None:
            return WhenToAnswer(None)
        return WhenToAnswer(max(0.0, self.due - now))

    def answer(self, _ctx: MiddlewareContext, *, replaced_queued: bool = False) -> None:
        self.answered_at.append(round(asyncio.get_running_loop().time(), 6))
        self.due = None


def _answerer(script: _Script, words: PendingWords | None = None) -> DroppedTurnAnswerer:
    words = words if words is not None else _words("what time do you open")
    answerer = DroppedTurnAnswerer(
        TurnKeeperOptions(max_fragments=4), words, reporter="TurnKeeper", recovering=lambda: False
    )
    answerer.when_to_answer = script.when_to_answer  # type: ignore[method-assign,assignment]
    answerer.answer = script.answer  # type: ignore[method-assign,assignment]
    return answerer


def _words(*said: str) -> PendingWords:
    words = PendingWords(max_fragments=4, max_age_s=60.0)
    for text in said:
        words.add(Fragment(text, 0.0))
    return words


def _ctx() -> MiddlewareContext:
    return MiddlewareContext(
        session=cast(Any, SimpleNamespace(current_speech=None)),
        agent=cast(Any, SimpleNamespace()),
        state=ConversationState(),
        emit=print,
    )


async def _until(at: float) -> None:
    await asyncio.sleep(at - asyncio.get_running_loop().time())


async def _started_at(
    at: float, script: _Script, words: PendingWords | None = None
) -> DroppedTurnAnswerer:
    """An answerer for ``script``, started at ``at`` (loop time)."""
    answerer = _answerer(script, words)
    await _until(at)
    answerer.start(_ctx())
    return answerer


def test_the_words_are_answered_when_the_delay_has_passed() -> None:
    async def main() -> _Script:
        script = _Script(due=1.5)
        answerer = await _started_at(1.0, script)
        await _until(3.0)
        await answerer.stop()
        return script

    script = run_virtual(main())
    assert script.answered_at == [1.5]
    assert script.looked_at == [1.0, 1.5, 1.5]  # the last look finds nothing left to answer


def test_a_wake_before_the_delay_looks_again_and_the_new_time_holds() -> None:
    async def main() -> _Script:
        script = _Script(due=1.5)
        answerer = await _started_at(1.0, script)
        await _until(1.2)
        script.due = 2.0  # the caller was heard again: livekit's delay starts over
        answerer.wake()
        await _until(3.0)
        await answerer.stop()
        return script

    script = run_virtual(main())
    # the timer set for 1.5 was dropped with the wait it belonged to: one answer, at 2.0
    assert script.answered_at == [2.0]
    assert script.looked_at == [1.0, 1.2, 2.0, 2.0]


def test_a_stopped_answerer_never_answers_later() -> None:
    async def main() -> _Script:
        script = _Script(due=1.5)
        answerer = await _started_at(1.0, script)
        await _until(1.2)
        await answerer.stop()
        await _until(3.0)
        return script

    script = run_virtual(main())
    assert script.answered_at == []
    assert script.looked_at == [1.0]


def test_a_wake_with_no_words_pending_and_no_delay_running_is_not_a_look() -> None:
    async def main() -> tuple[list[float], bool]:
        script = _Script(due=1.0)
        script.due = None  # nothing blocks and nothing is due: the words below decide
        words = _words()
        answerer = _answerer(script, words)
        answerer.start(_ctx())
        await _until(1.0)
        answerer.wake()  # nothing pending: the loop would only look and wait again
        await _until(2.0)
        words.add(Fragment("are you open on sunday", 2.0))
        answerer.wake()
        await _until(3.0)
        for fragment in words:
            fragment.delivered = True
        answerer.wake()
        await _until(4.0)
        await answerer.stop()
        return script.looked_at, words.any_undelivered()

    looked_at, pending = run_virtual(main())
    assert looked_at == [0.0, 2.0]
    assert not pending


def test_a_wake_while_the_delay_runs_is_a_look_even_with_the_words_gone() -> None:
    async def main() -> _Script:
        script = _Script(due=1.5)
        words = _words("what time do you open")
        answerer = await _started_at(1.0, script, words)
        await _until(1.2)
        for fragment in words:
            fragment.delivered = True  # livekit's own turn took them
        script.due = None
        answerer.wake()
        await _until(3.0)
        await answerer.stop()
        return script

    script = run_virtual(main())
    # the look at 1.2 finds nothing to answer and drops the 1.5 timer with its wait
    assert script.looked_at == [1.0, 1.2]
    assert script.answered_at == []
