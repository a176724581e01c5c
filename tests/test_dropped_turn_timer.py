"""The dropped-turn answerer waits for livekit's turn delay on one timer (virtual time): it answers
when the delay has passed, looks again when woken sooner, and leaves nothing behind when stopped."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from resilient_agent.middleware.dropped_turns import DroppedTurnAnswerer, WhenToAnswer
from resilient_agent.middleware.pending_words import PendingWords

from resilient_agent import ConversationState, MiddlewareContext
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


def _answerer(script: _Script) -> DroppedTurnAnswerer:
    keeper = SimpleNamespace(max_fragments=4, max_age_s=60.0, recovering=False)
    answerer = DroppedTurnAnswerer(cast(Any, keeper), PendingWords(cast(Any, keeper)))
    answerer.when_to_answer = script.when_to_answer  # type: ignore[method-assign,assignment]
    answerer.answer = script.answer  # type: ignore[method-assign,assignment]
    return answerer


def _ctx() -> MiddlewareContext:
    return MiddlewareContext(
        session=cast(Any, SimpleNamespace()),
        agent=cast(Any, SimpleNamespace()),
        state=ConversationState(),
        emit=print,
    )


async def _until(at: float) -> None:
    await asyncio.sleep(at - asyncio.get_running_loop().time())


def test_the_words_are_answered_when_the_delay_has_passed() -> None:
    async def main() -> _Script:
        script = _Script(due=1.5)
        answerer = _answerer(script)
        await _until(1.0)
        answerer.start(_ctx())
        await _until(3.0)
        await answerer.stop()
        return script

    script = run_virtual(main())
    assert script.answered_at == [1.5]
    assert script.looked_at == [1.0, 1.5, 1.5]  # the last look finds nothing left to answer


def test_a_wake_before_the_delay_looks_again_and_the_new_time_holds() -> None:
    async def main() -> _Script:
        script = _Script(due=1.5)
        answerer = _answerer(script)
        await _until(1.0)
        answerer.start(_ctx())
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
        answerer = _answerer(script)
        await _until(1.0)
        answerer.start(_ctx())
        await _until(1.2)
        await answerer.stop()
        await _until(3.0)
        return script

    script = run_virtual(main())
    assert script.answered_at == []
    assert script.looked_at == [1.0]
