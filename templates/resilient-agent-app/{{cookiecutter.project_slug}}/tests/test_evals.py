"""Judge evals: the real LLM answers, a second LLM grades the answer against an intent.

They cost money and are not deterministic, so they run only when a key is set (in the
environment or .env.local): GOOGLE_API_KEY runs them on Gemini directly, LIVEKIT_API_KEY and
LIVEKIT_API_SECRET through LiveKit Inference.
"""

from __future__ import annotations

import os

import pytest
from livekit.agents import AgentSession, inference, llm
from livekit.plugins import google

from agent import LLM_MODEL, Assistant  # loads .env.local, which may hold the keys

pytestmark = pytest.mark.skipif(
    not (os.getenv("GOOGLE_API_KEY") or os.getenv("LIVEKIT_API_KEY")),
    reason="judge evals call a real LLM: set GOOGLE_API_KEY or LIVEKIT_API_KEY",
)


def make_llm() -> llm.LLM:
    """The app's LLM, or the same model through LiveKit Inference."""
    if os.getenv("GOOGLE_API_KEY"):
        return google.LLM(model=LLM_MODEL)
    return inference.LLM(model=f"google/{LLM_MODEL}")


async def test_offers_help() -> None:
    async with make_llm() as model, make_llm() as judge, AgentSession(llm=model) as session:
        await session.start(Assistant())
        result = await session.run(user_input="Hello")

        reply = result.expect.next_event().is_message(role="assistant")
        await reply.judge(judge, intent="Greets the user and offers help, briefly and kindly.")
        result.expect.no_more_events()


async def test_weather_comes_from_the_tool() -> None:
    async with make_llm() as model, make_llm() as judge, AgentSession(llm=model) as session:
        await session.start(Assistant())
        result = await session.run(user_input="What's the weather like in Paris right now?")

        result.expect.next_event().is_function_call(name="lookup_weather")
        result.expect.next_event().is_function_call_output()
        reply = result.expect.next_event().is_message(role="assistant")
        await reply.judge(judge, intent="Says it is sunny and about 21 degrees Celsius in Paris.")


async def test_goodbye_ends_the_call() -> None:
    async with make_llm() as model, AgentSession(llm=model) as session:
        await session.start(Assistant())
        result = await session.run(user_input="That's all I needed, thanks. Goodbye!")

        result.expect.contains_function_call(name="end_call")
