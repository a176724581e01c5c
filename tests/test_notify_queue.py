"""One middleware's notify queue: order, setup gating, budgets, and no task while idle."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from resilient_agent import Middleware, never_waits
from resilient_agent._engine.dispatch import NotifyQueue, start
from resilient_agent.testing import run_virtual

CTX: Any = object()
_WHO = contextvars.ContextVar("who", default="nobody")


class Recorder(Middleware):
    hook_budget_s = 1.0

    def __init__(self, *, hang: set[str] | None = None, swallow: bool = False) -> None:
        super().__init__()
        self.seen: list[tuple[str, float]] = []
        self.hang = hang or set()
        self.swallow = swallow

    async def _record(self, what: str) -> None:
        loop = asyncio.get_running_loop()
        self.seen.append((what, loop.time()))
        if what.startswith("wait"):
            await asyncio.sleep(0.1)
        if what in self.hang:
            try:
                await asyncio.sleep(60.0)
            except asyncio.CancelledError:
                if not self.swallow:
                    raise
                await asyncio.sleep(0.5)
        self.seen.append((f"{what} done", loop.time()))

    async def on_user_state(self, ctx: Any, what: Any) -> None:
        await self._record(what)

    async def on_agent_state(self, ctx: Any, what: Any) -> None:
        await self._record(what)


def _run(mw: Recorder, script: Any) -> list[tuple[Any, ...]]:
    reports: list[tuple[Any, ...]] = []

    def report(who: Any, hook: str, exc: BaseException, action: str) -> None:
        reports.append((hook, type(exc).__name__, action, asyncio.get_running_loop().time()))

    async def main() -> None:
        queue = NotifyQueue(mw, CTX, report)
        await script(queue)
        for _ in range(1000):
            if not queue.busy:
                break
            await asyncio.sleep(0.05)
        assert queue.task is None, "a queue with nothing to run keeps no task"

    run_virtual(main())
    return reports


def _agent_states(*whats: str) -> Any:
    """A script: open the queue, then queue ``on_agent_state`` with each of ``whats``."""

    async def script(queue: NotifyQueue) -> None:
        queue.open()
        for what in whats:
            queue.put("on_agent_state", (what,), urgent=False)

    return script


def test_urgent_calls_overtake_queued_ones_and_keep_their_own_order() -> None:
    mw = Recorder()

    async def script(queue: NotifyQueue) -> None:
        queue.put("on_agent_state", ("a",), urgent=False)
        queue.put("on_agent_state", ("b",), urgent=False)
        queue.put("on_user_state", ("u1",), urgent=True)
        queue.put("on_user_state", ("u2",), urgent=True)
        queue.open()

    assert _run(mw, script) == []
    assert [w for w, _ in mw.seen if not w.endswith("done")] == ["u1", "u2", "a", "b"]


def test_nothing_runs_before_the_middleware_is_set_up() -> None:
    mw = Recorder()

    async def script(queue: NotifyQueue) -> None:
        queue.put("on_agent_state", ("early",), urgent=False)
        await asyncio.sleep(2.0)
        assert mw.seen == []
        queue.open()
        await asyncio.sleep(0)
        queue.put("on_agent_state", ("later",), urgent=False)

    _run(mw, script)
    assert [w for w, _ in mw.seen] == ["early", "early done", "later", "later done"]


def test_a_hang_after_a_hook_that_waited_is_still_cut_at_its_budget() -> None:
    mw = Recorder(hang={"stuck"})
    reports = _run(mw, _agent_states("wait first", "stuck", "after"))
    started = dict(mw.seen)
    assert [r[:3] for r in reports] == [("on_agent_state", "HookTimeoutError", "cancelled")]
    assert reports[0][3] == pytest.approx(started["stuck"] + 1.0, abs=0.01)
    assert "stuck done" not in started
    assert started["after"] == pytest.approx(started["stuck"] + 1.0, abs=0.01)


def test_each_hook_gets_a_whole_budget_of_its_own_after_one_ran_past_it() -> None:
    mw = Recorder(hang={"stuck", "stuck again"})
    reports = _run(mw, _agent_states("stuck", "wait after", "stuck again"))
    started = dict(mw.seen)
    assert [r[:3] for r in reports] == [("on_agent_state", "HookTimeoutError", "cancelled")] * 2
    assert "wait after done" in started
    assert reports[1][3] == pytest.approx(started["stuck again"] + 1.0, abs=0.01)


def test_a_hook_that_swallows_the_cancellation_is_still_reported() -> None:
    mw = Recorder(hang={"stuck"}, swallow=True)
    reports = _run(mw, _agent_states("stuck", "after"))
    assert [r[:3] for r in reports] == [("on_agent_state", "HookTimeoutError", "cancelled")]
    assert [w for w, _ in mw.seen] == ["stuck", "stuck done", "after", "after done"]


def test_a_raising_hook_is_reported_and_the_next_one_runs() -> None:
    class Raises(Recorder):
        async def on_user_state(self, ctx: Any, what: Any) -> None:
            raise ValueError(what)

    mw = Raises()

    async def script(queue: NotifyQueue) -> None:
        queue.open()
        queue.put("on_user_state", ("boom",), urgent=True)
        queue.put("on_agent_state", ("after",), urgent=False)

    reports = _run(mw, script)
    assert [r[:3] for r in reports] == [("on_user_state", "ValueError", "continued_without_it")]
    assert [w for w, _ in mw.seen] == ["after", "after done"]


def test_hooks_run_in_the_context_the_queue_was_made_in() -> None:
    seen: list[str] = []

    class Reads(Middleware):
        async def on_user_state(self, ctx: Any, what: Any) -> None:
            seen.append(_WHO.get())

    async def script_main() -> None:
        _WHO.set("session")
        queue = NotifyQueue(Reads(), CTX, lambda *_: None)
        queue.open()

        async def emitter() -> None:
            _WHO.set("livekit task")
            queue.put("on_user_state", ("x",), urgent=False)

        await asyncio.get_running_loop().create_task(emitter())
        await asyncio.sleep(0.1)

    run_virtual(script_main())
    assert seen == ["session"]


def test_a_hook_that_waits_gets_what_it_waited_for_and_raises_what_it_raises() -> None:
    # the queue runs a hook's first step itself and resumes the rest: values and errors pass
    seen: list[Any] = []

    class Waits(Recorder):
        async def on_user_state(self, ctx: Any, what: Any) -> None:
            seen.append(await asyncio.sleep(0.1, result=what))
            seen.append(await asyncio.sleep(0.1, result=f"{what} again"))
            raise ValueError(what)

    async def script(queue: NotifyQueue) -> None:
        queue.open()
        queue.put("on_user_state", ("w",), urgent=False)

    reports = _run(Waits(), script)
    assert seen == ["w", "w again"]
    assert [r[:3] for r in reports] == [("on_user_state", "ValueError", "continued_without_it")]


def test_a_hook_that_returns_another_kind_of_awaitable_is_awaited_under_its_budget() -> None:
    class FutureHook(Recorder):
        def on_user_state(self, ctx: Any, what: Any) -> Any:
            self.seen.append((what, asyncio.get_running_loop().time()))
            return asyncio.get_running_loop().create_future()  # never done

    mw = FutureHook()

    async def script(queue: NotifyQueue) -> None:
        queue.open()
        queue.put("on_user_state", ("stuck",), urgent=False)
        queue.put("on_agent_state", ("after",), urgent=False)

    reports = _run(mw, script)
    started = dict(mw.seen)
    assert [r[:3] for r in reports] == [("on_user_state", "HookTimeoutError", "cancelled")]
    assert started["after"] == pytest.approx(started["stuck"] + 1.0, abs=0.01)


class Plain(Middleware):
    """Notify hooks marked never_waits: they run with no task."""

    def __init__(self, name: str, into: list[str]) -> None:
        super().__init__()
        self.tag = name
        self.into = into

    @never_waits
    async def on_user_state(self, ctx: Any, what: Any) -> None:
        task = "no task" if asyncio.current_task() is None else "a task"
        self.into.append(f"{self.tag}:{what} in {task}")


class Tasked(Middleware):
    def __init__(self, name: str, into: list[str]) -> None:
        super().__init__()
        self.tag = name
        self.into = into

    async def on_user_state(self, ctx: Any, what: Any) -> None:
        task = "no task" if asyncio.current_task() is None else "a task"
        self.into.append(f"{self.tag}:{what} in {task}")


def test_plain_queues_an_event_starts_share_one_callback_where_their_tasks_would_run() -> None:
    # three queues started by one event, the middle one with a task: the hooks run in the order
    # the three tasks' first steps would have (side by side), before anything scheduled after
    seen: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        queues = [
            NotifyQueue(Plain("a", seen), CTX, lambda *_: None),
            NotifyQueue(Tasked("b", seen), CTX, lambda *_: None),
            NotifyQueue(Plain("c", seen), CTX, lambda *_: None),
            NotifyQueue(Plain("d", seen), CTX, lambda *_: None),
        ]
        for queue in queues:
            queue.open()
        made = len(asyncio.all_tasks())
        calls_before = len(loop._ready)  # type: ignore[attr-defined]
        start([queue for queue in queues if queue.add("on_user_state", (1,), urgent=False)])
        # two callbacks (a; then c and d together) and b's task: three handles, not four
        assert len(loop._ready) - calls_before == 3  # type: ignore[attr-defined]
        assert len(asyncio.all_tasks()) == made + 1
        queues[0].add("on_user_state", (2,), urgent=False)  # joins the callback to come
        loop.call_soon(seen.append, "after")
        await asyncio.sleep(0.1)
        assert all(not queue.busy for queue in queues)

    run_virtual(main())
    assert seen == [
        "a:1 in no task",
        "a:2 in no task",
        "b:1 in a task",
        "c:1 in no task",
        "d:1 in no task",
        "after",
    ]


def test_a_plain_hook_that_waits_after_all_is_taken_over_by_a_task_under_its_budget() -> None:
    class WaitsAfterAll(Recorder):
        @never_waits
        async def on_user_state(self, ctx: Any, what: Any) -> None:
            await self._record(what)

        @never_waits
        async def on_agent_state(self, ctx: Any, what: Any) -> None:
            await self._record(what)

    mw = WaitsAfterAll(hang={"stuck"})
    reports = _run(mw, _agent_states("wait first", "stuck", "after"))
    started = dict(mw.seen)
    assert [w for w, _ in mw.seen] == [
        "wait first",
        "wait first done",
        "stuck",
        "after",
        "after done",
    ]
    assert [r[:3] for r in reports] == [("on_agent_state", "HookTimeoutError", "cancelled")]
    assert reports[0][3] == pytest.approx(started["stuck"] + 1.0, abs=0.01)


def test_every_first_party_notify_hook_is_marked_never_waits() -> None:
    # each is plain bookkeeping; an unmarked one would put its middleware back on a task per event
    from resilient_agent.middleware import (
        ContextIntegrity,
        RealtimeInputHold,
        RealtimeReplyWatch,
        SilentReply,
        SilentTurnGuard,
        TurnKeeper,
        WaitForCaller,
        Watchdog,
    )

    from resilient_agent._engine.hooks import HOOKS, runs_without_a_task

    for cls in (
        ContextIntegrity,
        RealtimeInputHold,
        RealtimeReplyWatch,
        SilentReply,
        SilentTurnGuard,
        TurnKeeper,
        WaitForCaller,
        Watchdog,
    ):
        overridden = [
            hook
            for hook, spec in HOOKS.items()
            if spec.kind == "notify" and getattr(cls, hook) is not getattr(Middleware, hook)
        ]
        assert overridden, cls.__name__
        unmarked = [hook for hook in overridden if not runs_without_a_task(cls(), hook)]
        assert unmarked == [], cls.__name__
