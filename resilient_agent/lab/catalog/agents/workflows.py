"""App agents that hand control to code not written on the base class under test.

The app's own agent is built on the base class under test, as in :mod:`.agents`, but what it
hands the call to is not: livekit's workflow tasks as they are (``GetEmailTask``,
``GetAddressTask``, ``TaskGroup``), and the app's own ``AgentTask``s and handoff targets written
on plain ``livekit.agents.Agent``. Whatever protects the call must protect them too.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from livekit.agents import Agent, AgentTask, RunContext, function_tool, get_job_context
from livekit.agents.beta.workflows import (
    GetAddressTask,
    GetEmailTask,
    GetPhoneNumberTask,
    TaskCompletedEvent,
    TaskGroup,
)

from ....testing.scenario import AgentFactory
from . import FAREWELL, HOLD_MESSAGE, INSTRUCTIONS

__all__ = [
    "ACCOUNT_LINE",
    "ACCOUNT_PROMPT",
    "FILE_LINE",
    "PHONE_LINE",
    "SAVING_LINE",
    "SURVEY_PROMPT",
    "AccountTask",
    "BookingDesk",
    "EndCallDesk",
    "SurveyTask",
    "Workflow",
    "account_task_agent",
    "after_workflow_agent",
    "before_workflow_agent",
    "email_then_phone_group_agent",
    "email_then_phone_on_enter_agent",
    "email_then_phone_tasks_agent",
    "plain_booking_desk_agent",
    "plain_end_call_desk_agent",
    "protected_email_task_agent",
    "survey_task_agent",
]

Workflow = Literal["email", "address", "group"]
"""What the app's tool awaits: ``GetEmailTask()``, ``GetAddressTask()``, or a ``TaskGroup`` of
both (email first)."""

FILE_LINE = "One moment while I open your customer file for you."
SAVING_LINE = "Thank you, I am saving that to your customer file right now."
ACCOUNT_PROMPT = "What is your account number?"
ACCOUNT_LINE = "Let me pull up that account for you, this takes a moment."
SURVEY_PROMPT = "Before we go on, please rate your last visit from one to five."
PHONE_LINE = "Thanks, your email is saved. Next I need the best phone number to reach you."


def _workflow(kind: Workflow) -> AgentTask[Any]:
    """A fresh workflow task of livekit's, exactly as an app would await it."""
    if kind == "email":
        return GetEmailTask()
    if kind == "address":
        return GetAddressTask()
    return (
        TaskGroup()
        .add(GetEmailTask, id="email", description="Collect the caller's email address")
        .add(GetAddressTask, id="address", description="Collect the caller's postal address")
    )


def _summary(kind: Workflow, result: object) -> str:
    """What the app's tool tells its LLM once the workflow is done."""
    return f"Saved the caller's details ({kind}): {result!r}."


def before_workflow_agent(kind: Workflow) -> AgentFactory:
    """A ``collect_details`` tool: a protected hold line, then livekit's workflow task."""

    def build(base: type[Agent]) -> Agent:
        class FrontDesk(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            @function_tool
            async def collect_details(self, ctx: RunContext[None]) -> str:
                """Collect the caller's contact details."""
                await ctx.session.say(FILE_LINE, allow_interruptions=False)
                result = await _workflow(kind)
                return _summary(kind, result)

        return FrontDesk()

    return build


def after_workflow_agent(kind: Workflow, *, work_seconds: float) -> AgentFactory:
    """A ``collect_details`` tool: livekit's workflow task, then a protected line and work."""

    def build(base: type[Agent]) -> Agent:
        class FrontDesk(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            @function_tool
            async def collect_details(self, ctx: RunContext[None]) -> str:
                """Collect the caller's contact details."""
                result = await _workflow(kind)
                await ctx.session.say(SAVING_LINE, allow_interruptions=False)
                await asyncio.sleep(work_seconds)  # the customer database
                return _summary(kind, result)

        return FrontDesk()

    return build


def email_then_phone_group_agent(base: type[Agent]) -> Agent:
    """A ``collect_details`` tool awaiting a ``TaskGroup``: email, a protected line, phone.

    The group's ``on_task_completed`` says the line once ``GetEmailTask`` is done, before
    ``GetPhoneNumberTask`` starts.
    """

    class FrontDesk(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=INSTRUCTIONS)

        @function_tool
        async def collect_details(self, ctx: RunContext[None]) -> str:
            """Collect the caller's contact details."""

            async def completed(ev: TaskCompletedEvent) -> None:
                if ev.task_id == "email":
                    await ctx.session.say(PHONE_LINE, allow_interruptions=False)

            group = (
                TaskGroup(on_task_completed=completed)
                .add(GetEmailTask, id="email", description="Collect the caller's email address")
                .add(GetPhoneNumberTask, id="phone", description="Collect the caller's phone")
            )
            return f"Saved the caller's details: {await group!r}."

    return FrontDesk()


def email_then_phone_tasks_agent(base: type[Agent]) -> Agent:
    """A ``collect_details`` tool awaiting two plain tasks in turn, a protected line between.

    ``GetEmailTask``, then the line, then ``GetPhoneNumberTask``: the ``TaskGroup`` of
    :func:`email_then_phone_group_agent` written without the group, as many apps do.
    """

    class FrontDesk(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=INSTRUCTIONS)

        @function_tool
        async def collect_details(self, ctx: RunContext[None]) -> str:
            """Collect the caller's contact details."""
            email = await GetEmailTask()
            await ctx.session.say(PHONE_LINE, allow_interruptions=False)
            phone = await GetPhoneNumberTask()
            return f"Saved the caller's details: {email!r}, {phone!r}."

    return FrontDesk()


def email_then_phone_on_enter_agent(base: type[Agent]) -> Agent:
    """An agent whose ``on_enter`` awaits the tasks of :func:`email_then_phone_tasks_agent`."""

    class Intake(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=INSTRUCTIONS)

        async def on_enter(self) -> None:
            """Collect the caller's email, then their phone number."""
            await GetEmailTask()
            await self.session.say(PHONE_LINE, allow_interruptions=False)
            await GetPhoneNumberTask()

    return Intake()


def protected_email_task_agent(base: type[Agent]) -> Agent:
    """A ``collect_details`` tool awaiting ``GetEmailTask(allow_interruptions=False)``."""

    class FrontDesk(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=INSTRUCTIONS)

        @function_tool
        async def collect_details(self, ctx: RunContext[None]) -> str:
            """Collect the caller's contact details."""
            result = await GetEmailTask(allow_interruptions=False)
            return _summary("email", result)

    return FrontDesk()


class AccountTask(AgentTask[str]):
    """The app's own task, on plain ``AgentTask``: asks for the account, looks it up protected."""

    def __init__(self, *, work_seconds: float) -> None:
        super().__init__(instructions="Ask for the caller's account number and look it up.")
        self._work_seconds = work_seconds

    async def on_enter(self) -> None:
        """Ask for the account number, as livekit's own tasks ask their question."""
        self.session.generate_reply(instructions="Ask the caller for their account number.")

    @function_tool
    async def look_up_account(self, ctx: RunContext[None], number: str) -> None:
        """Look the caller's account up.

        Args:
            number: The account number.
        """
        await ctx.session.say(ACCOUNT_LINE, allow_interruptions=False)
        await asyncio.sleep(self._work_seconds)  # the account system
        self.complete(f"account {number}")


def account_task_agent(*, work_seconds: float) -> AgentFactory:
    """A ``verify_account`` tool awaiting the app's plain :class:`AccountTask`."""

    def build(base: type[Agent]) -> Agent:
        class FrontDesk(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            @function_tool
            async def verify_account(self, ctx: RunContext[None]) -> str:
                """Verify the caller's account."""
                account = await AccountTask(work_seconds=work_seconds)
                return f"Verified {account}."

        return FrontDesk()

    return build


class SurveyTask(AgentTask[str]):
    """The app's own task, on plain ``AgentTask``: a protected prompt from ``on_enter``."""

    def __init__(self) -> None:
        super().__init__(instructions="Ask the caller to rate their last visit.")

    async def on_enter(self) -> None:
        """Say the survey's prompt, protected."""
        self.session.say(SURVEY_PROMPT, allow_interruptions=False)

    @function_tool
    async def record_rating(self, ctx: RunContext[None], rating: str) -> None:
        """Record the caller's rating.

        Args:
            rating: From one to five.
        """
        self.complete(rating)


def survey_task_agent(base: type[Agent]) -> Agent:
    """A ``start_survey`` tool awaiting the app's plain :class:`SurveyTask`."""

    class FrontDesk(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=INSTRUCTIONS)

        @function_tool
        async def start_survey(self, ctx: RunContext[None]) -> str:
            """Ask the caller about their last visit."""
            rating = await SurveyTask()
            return f"The caller rated their visit {rating}."

    return FrontDesk()


class EndCallDesk(Agent):
    """A billing desk on plain ``Agent``, with the production ``end_call`` of :mod:`.agents`."""

    def __init__(self) -> None:
        super().__init__(instructions="You are the billing desk. " + INSTRUCTIONS)

    @function_tool
    async def end_call(self, ctx: RunContext[None]) -> None:
        """End the call when the caller says goodbye."""
        try:
            await ctx.session.say(FAREWELL)
            await asyncio.sleep(len(FAREWELL) / 15 + 1.5)  # let the farewell reach the line
        finally:
            get_job_context().shutdown(reason="end_call")


def plain_end_call_desk_agent(base: type[Agent]) -> Agent:
    """A front desk whose ``transfer_to_billing`` tool returns a plain :class:`EndCallDesk`."""

    class FrontDesk(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=INSTRUCTIONS)

        @function_tool
        async def transfer_to_billing(self, ctx: RunContext[None]) -> Agent:
            """Hand the call to the billing desk."""
            return EndCallDesk()

    return FrontDesk()


class BookingDesk(Agent):
    """A booking desk on plain ``Agent`` whose ``book_table`` says a protected hold message."""

    def __init__(self, *, work_seconds: float) -> None:
        super().__init__(instructions="You take bookings. " + INSTRUCTIONS)
        self._work_seconds = work_seconds

    @function_tool
    async def book_table(self, ctx: RunContext[None], time: str) -> str:
        """Book a table.

        Args:
            time: When the table is wanted.
        """
        await ctx.session.say(HOLD_MESSAGE, allow_interruptions=False)
        await asyncio.sleep(self._work_seconds)  # the booking system
        return f"Table booked for {time}."


def plain_booking_desk_agent(*, work_seconds: float) -> AgentFactory:
    """A front desk whose ``transfer_to_bookings`` tool returns a plain :class:`BookingDesk`."""

    def build(base: type[Agent]) -> Agent:
        class FrontDesk(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            @function_tool
            async def transfer_to_bookings(self, ctx: RunContext[None]) -> Agent:
                """Hand the call to the booking desk."""
                return BookingDesk(work_seconds=work_seconds)

        return FrontDesk()

    return build
