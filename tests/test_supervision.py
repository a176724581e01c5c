"""One runtime per session: plain agents handed control are supervised by the chain before them."""

from __future__ import annotations

from typing import Any, ClassVar

from livekit.agents import Agent, RunContext, function_tool

from resilient_agent import (
    CloseReason,
    Middleware,
    MiddlewareContext,
    ResilientAgent,
    ToolCall,
    UserTurn,
    UserTurnNext,
    unsupervised,
)
from resilient_agent.testing import LLMRule, Scenario, ToolCallScript, Utterance, run_scenario

MANAGERS: list[Agent] = []


class Journal(Middleware):
    """Records the tool calls and user turns the chain runs, with the agent active for each."""

    def __init__(self) -> None:
        self.tools: list[tuple[str, str]] = []
        self.turns: list[tuple[str, str]] = []

    async def on_tool_start(self, ctx: MiddlewareContext, call: ToolCall) -> None:
        self.tools.append((type(ctx.agent).__name__, call.name))

    async def wrap_user_turn(
        self, ctx: MiddlewareContext, turn: UserTurn, call_next: UserTurnNext
    ) -> None:
        self.turns.append((type(ctx.agent).__name__, turn.text))
        await call_next(turn)


class Manager(Agent):
    """A plain ``Agent`` (third-party code nobody rebased)."""

    def __init__(self) -> None:
        super().__init__(instructions="You are the manager.")

    @function_tool
    async def check_order(self, ctx: RunContext[None], order: str) -> str:
        """Look an order up.

        Args:
            order: The order number.
        """
        return f"Order {order} has shipped."


def front_desk(opt_out: bool) -> type[Agent]:
    class FrontDesk(ResilientAgent):
        def __init__(self) -> None:
            super().__init__(instructions="You are the front desk.", middleware=[Journal()])

        @function_tool
        async def transfer_to_manager(self, ctx: RunContext[None]) -> None:
            """Hand the call to the manager."""
            manager = Manager()
            MANAGERS.append(manager)
            ctx.session.update_agent(unsupervised(manager) if opt_out else manager)

    return FrontDesk


SCENARIO = Scenario(
    name="t/plain_target",
    family="t",
    description="",
    agent=lambda base: base(),
    utterances=(
        Utterance(1.0, 2.4, "let me talk to the manager", expect_reply=False),
        Utterance(5.0, 6.6, "where is my order twelve", reply_within=4.0),
    ),
    llm=(
        LLMRule(when_user_says="manager", tool_calls=(ToolCallScript("transfer_to_manager"),)),
        LLMRule(
            when_user_says="order", tool_calls=(ToolCallScript("check_order", {"order": "12"}),)
        ),
        LLMRule(text="Your order has shipped.", after_tool="check_order"),
    ),
    duration=14.0,
)


def _journal(world: Any) -> Journal:
    found = world.agent.middleware["Journal"]
    assert isinstance(found, Journal)
    return found


def test_a_plain_agent_handed_control_runs_its_tools_and_turns_through_the_chain() -> None:
    MANAGERS.clear()
    world, outcome = run_scenario(SCENARIO, front_desk(opt_out=False))
    assert outcome.passed, outcome.reasons
    journal = _journal(world)
    assert journal.tools == [("FrontDesk", "transfer_to_manager"), ("Manager", "check_order")]
    assert [agent for agent, _text in journal.turns] == ["FrontDesk", "Manager"]
    # the shadows are put back when the session ends: the plain agent is livekit's again
    (manager,) = MANAGERS
    assert not {"llm_node", "on_enter", "on_exit", "on_user_turn_completed"} & set(vars(manager))


def test_an_agent_opted_out_runs_exactly_as_on_livekit() -> None:
    MANAGERS.clear()
    world, outcome = run_scenario(SCENARIO, front_desk(opt_out=True))
    assert outcome.passed, outcome.reasons
    journal = _journal(world)
    assert journal.tools == [("FrontDesk", "transfer_to_manager")]
    assert [agent for agent, _text in journal.turns] == ["FrontDesk"]
    (manager,) = MANAGERS
    assert not {"llm_node", "on_user_turn_completed"} & set(vars(manager))


class Carrier(Middleware):
    """Counts its sessions' setups; carries a counter across a handoff."""

    closes: ClassVar[list[CloseReason]] = []
    taken: ClassVar[list[object]] = []

    async def setup(self, ctx: MiddlewareContext) -> None:
        Carrier.taken.append(ctx.take("Carrier"))

    async def aclose(self, ctx: MiddlewareContext, reason: CloseReason) -> None:
        Carrier.closes.append(reason)
        if reason == "handoff":
            ctx.carry("Carrier", "state of the front desk")


class LegacyClose(Middleware):
    """The first form of ``aclose``, without arguments."""

    closed = 0

    async def aclose(self) -> None:  # type: ignore[override]
        LegacyClose.closed += 1


def test_a_handoff_between_resilient_agents_carries_state_through_the_core() -> None:
    class Next(ResilientAgent):
        def __init__(self) -> None:
            super().__init__(instructions="next", middleware=[Carrier(), LegacyClose()])

    class First(ResilientAgent):
        def __init__(self) -> None:
            super().__init__(instructions="first", middleware=[Carrier(), LegacyClose()])

        @function_tool
        async def transfer_to_manager(self, ctx: RunContext[None]) -> None:
            """Hand the call over."""
            ctx.session.update_agent(Next())

    Carrier.closes, Carrier.taken, LegacyClose.closed = [], [], 0
    scenario = Scenario(
        name="t/carry",
        family="t",
        description="",
        agent=lambda base: First(),
        utterances=(Utterance(1.0, 2.4, "let me talk to the manager", expect_reply=False),),
        llm=(
            LLMRule(when_user_says="manager", tool_calls=(ToolCallScript("transfer_to_manager"),)),
        ),
        duration=8.0,
    )
    _world, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert Carrier.closes == ["handoff", "session_end"]
    assert Carrier.taken == [None, "state of the front desk"]
    assert LegacyClose.closed == 2


def test_the_middleware_guide_carries_state_through_a_handoff() -> None:
    import asyncio
    from pathlib import Path

    from test_docs import fenced

    from resilient_agent import ConversationState

    guide = Path(__file__).parent.parent / "docs" / "middleware.md"
    (block,) = [b for b in fenced(guide, "python") if "class CallerMood" in b]
    names: dict[str, Any] = {}
    exec(block, names)
    ctx = MiddlewareContext(
        session=None,  # type: ignore[arg-type]
        agent=None,  # type: ignore[arg-type]
        state=ConversationState(),
        emit=lambda _event: None,
    )

    async def handoff() -> tuple[str, str]:
        leaving, entering = names["CallerMood"](), names["CallerMood"]()
        await leaving.setup(ctx)
        leaving.mood = "annoyed"
        await leaving.aclose(ctx, "handoff")
        await entering.setup(ctx)
        fresh = names["CallerMood"]()
        await fresh.setup(ctx)  # taken once: a later chain starts afresh
        return entering.mood, fresh.mood

    assert asyncio.run(handoff()) == ("annoyed", "neutral")


def _modalities_answered(name: str, monkeypatch: Any) -> list[str]:
    from livekit.agents import AgentSession

    from resilient_agent.lab.catalog import scenarios

    asked: list[str] = []
    original = AgentSession.generate_reply

    def spy(self: AgentSession[Any], **kwargs: Any) -> Any:
        if kwargs.get("user_input"):
            asked.append(kwargs.get("input_modality", "text"))
        return original(self, **kwargs)

    monkeypatch.setattr(AgentSession, "generate_reply", spy)
    scenario = next(s for s in scenarios() if s.name == name)
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert outcome.passed, outcome.reasons
    return asked


def test_words_the_library_answers_keep_the_modality_they_came_in_with(monkeypatch: Any) -> None:
    # spoken words recovered over the transfer message, with a typed message among them: voice
    spoken = _modalities_answered("lost_words/typed_while_caller_speaks_in_handoff", monkeypatch)
    assert spoken and spoken[-1] == "audio"
    # only a typed message, refused during the handoff: answered as text, as RoomIO asked
    typed = _modalities_answered("lost_words/typed_during_handoff", monkeypatch)
    assert typed and set(typed) == {"text"}
