from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from livekit.agents import llm
from livekit.agents.llm import ChatContext, FunctionCall, FunctionCallOutput

from resilient_agent.testing.audio import (
    FRAME_SAMPLES,
    KIND_AGENT,
    SAMPLE_RATE,
    AudioMarker,
    PlayoutAudioOutput,
    read_markers,
)
from resilient_agent.testing.clock import run_virtual
from resilient_agent.testing.llm import LLMRequest, LLMRule, ScriptedLLM, ToolCallScript
from resilient_agent.testing.tts import ScriptedTTS

TOL = 0.02

ORDER = LLMRule(
    text="Your order ships today.",
    when_user_says="ORDER",
    tool_calls=(ToolCallScript("lookup_order", {"id": 42}),),
    ttft=0.4,
    duration=1.0,
)
AFTER_LOOKUP = LLMRule(text="It is on its way.", after_tool="lookup_order")
CATCH_ALL = LLMRule(text="Anything else?")


def user_ctx(*texts: str) -> ChatContext:
    ctx = ChatContext.empty()
    for text in texts:
        ctx.add_message(role="user", content=text)
    return ctx


def tool_ctx(user_text: str, tool: str) -> ChatContext:
    ctx = user_ctx(user_text)
    ctx.items.append(FunctionCall(call_id="call_1", name=tool, arguments="{}"))
    ctx.items.append(FunctionCallOutput(call_id="call_1", name=tool, output="ok", is_error=False))
    return ctx


# --- LLM rules --------------------------------------------------------------------------------


def test_rule_matches_user_word_case_insensitively() -> None:
    async def main() -> list[tuple[str, str | None, str | None]]:
        scripted = ScriptedLLM([ORDER, AFTER_LOOKUP, CATCH_ALL])
        answers = []
        for ctx in (
            user_ctx("Where is my order?"),
            user_ctx("hi there"),
            tool_ctx("where is my order", "lookup_order"),
            tool_ctx("where is my order", "other_tool"),
        ):
            rule, last_user, last_tool = scripted.answer_for(ctx)
            answers.append((rule.text, last_user, last_tool))
        return answers

    assert run_virtual(main()) == [
        ("Your order ships today.", "Where is my order?", None),
        ("Anything else?", "hi there", None),
        ("It is on its way.", None, "lookup_order"),
        # no rule answers another tool's output: the fallback does
        ("Done.", None, "other_tool"),
    ]


def test_a_placeholder_for_a_running_tool_is_not_its_output() -> None:
    # what livekit injects for a tool still running (an AgentTask awaited inside it): the
    # context then ends in the task's instructions, not in the tool's result
    ctx = user_ctx("please update my details")
    running = {"__lk_running_placeholder__": True}
    ctx.items.append(FunctionCall(call_id="c", name="collect", arguments="{}", extra=running))
    ctx.items.append(
        FunctionCallOutput(
            call_id="c",
            name="collect",
            output="The tool call is still in progress.",
            is_error=False,
        )
    )
    ctx.add_message(role="system", content="Ask the user for their email address.")
    ask = LLMRule(text="What is your email?", when_instructed="ask the user for their EMAIL")
    done = LLMRule(text="Saved.", after_tool="collect")
    rule, last_user, last_tool = ScriptedLLM([done, ask]).answer_for(ctx)
    assert (rule, last_user, last_tool) == (ask, "please update my details", None)
    # without the flag it is a real output, answered as one
    ctx.items[1] = FunctionCall(call_id="c", name="collect", arguments="{}")
    rule, _, last_tool = ScriptedLLM([done, ask]).answer_for(ctx)
    assert (rule, last_tool) == (done, "collect")


def test_instructions_match_only_after_the_last_turn() -> None:
    ask = LLMRule(text="What is your email?", when_instructed="email")
    ctx = ChatContext.empty()
    ctx.add_message(role="system", content="You capture an email address.")
    ctx.add_message(role="user", content="hello")
    # the agent's own instructions come before the caller's turn: not what this request asks
    rule, _, _ = ScriptedLLM([ask, CATCH_ALL]).answer_for(ctx)
    assert rule is CATCH_ALL
    ctx.add_message(role="system", content="Ask for their email address.")
    rule, _, _ = ScriptedLLM([ask, CATCH_ALL]).answer_for(ctx)
    assert rule is ask


def test_first_matching_rule_wins() -> None:
    scripted = ScriptedLLM([CATCH_ALL, ORDER])
    rule, _, _ = scripted.answer_for(user_ctx("my order"))
    assert rule is CATCH_ALL


def test_rule_matches_only_the_last_user_message() -> None:
    scripted = ScriptedLLM([ORDER])
    rule, last_user, _ = scripted.answer_for(user_ctx("my order", "thanks"))
    assert rule.text == "Sure: thanks."
    assert last_user == "thanks"


def test_fallback_echoes_the_user() -> None:
    scripted = ScriptedLLM(fallback_ttft=0.7)
    rule, last_user, last_tool = scripted.answer_for(user_ctx("book a table"))
    assert (rule.text, rule.ttft, last_user, last_tool) == (
        "Sure: book a table.",
        0.7,
        "book a table",
        None,
    )
    rule, last_user, _ = scripted.answer_for(ChatContext.empty())
    assert (rule.text, last_user) == ("How can I help?", None)
    ctx = user_ctx("hello")
    ctx.add_message(role="assistant", content="Hi!")
    rule, last_user, _ = scripted.answer_for(ctx)
    assert (rule.text, last_user) == ("How can I help?", None)


def test_rule_matches_predicate() -> None:
    assert LLMRule(when_user_says="cancel").matches("Please CANCEL it", None)
    assert not LLMRule(when_user_says="cancel").matches("keep it", None)
    assert not LLMRule(when_user_says="cancel").matches(None, None)
    assert not LLMRule(when_user_says="cancel").matches("cancel", "some_tool")
    assert LLMRule().matches(None, None)
    assert not LLMRule().matches(None, "some_tool")
    assert LLMRule(after_tool="t").matches(None, "t")
    assert not LLMRule(after_tool="t").matches("t", None)


# --- LLM streaming ----------------------------------------------------------------------------

Chunk = tuple[float, str | None, list[llm.FunctionToolCall]]


async def _consume(scripted: ScriptedLLM, ctx: ChatContext, **kwargs: object) -> list[Chunk]:
    loop = asyncio.get_running_loop()
    chunks: list[Chunk] = []
    async with scripted.chat(chat_ctx=ctx, **kwargs) as stream:  # type: ignore[arg-type]
        async for chunk in stream:
            assert chunk.delta is not None
            chunks.append((loop.time(), chunk.delta.content, list(chunk.delta.tool_calls)))
    return chunks


def test_stream_sends_words_at_ttft_then_tool_calls_at_duration() -> None:
    scripted = ScriptedLLM([ORDER])

    async def main() -> list[Chunk]:
        await asyncio.sleep(2.0)
        return await _consume(scripted, user_ctx("where is my order"))

    chunks = run_virtual(main())
    text_chunks = [(t, c) for t, c, calls in chunks if not calls]
    call_chunks = [(t, calls) for t, c, calls in chunks if calls]
    assert [c for _, c in text_chunks] == ["Your", " order", " ships", " today."]
    assert "".join(c or "" for _, c in text_chunks) == "Your order ships today."
    assert [t for t, _ in text_chunks] == pytest.approx([2.4] * 4, abs=TOL)
    assert len(call_chunks) == 1
    at, calls = call_chunks[0]
    assert at == pytest.approx(3.0, abs=TOL)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("lookup_order", {"id": 42})]
    assert calls[0].call_id.startswith("call_")

    assert scripted.requests == [
        LLMRequest(
            at=pytest.approx(2.0, abs=TOL),  # type: ignore[arg-type]
            user_texts=("where is my order",),
            last_user_text="where is my order",
            last_tool=None,
            reply="Your order ships today.",
            tool_calls=("lookup_order",),
        )
    ]


def test_tool_choice_none_drops_tool_calls() -> None:
    scripted = ScriptedLLM([ORDER])

    async def main() -> list[Chunk]:
        return await _consume(scripted, user_ctx("my order"), tool_choice="none")

    chunks = run_virtual(main())
    assert [c for _, c, _ in chunks] == ["Your", " order", " ships", " today."]
    assert all(not calls for _, _, calls in chunks)
    assert scripted.requests[0].tool_calls == ()
    assert scripted.requests[0].reply == "Your order ships today."


def test_tool_only_rule_streams_no_text() -> None:
    rule = LLMRule(
        tool_calls=(ToolCallScript("hang_up"), ToolCallScript("log", {"a": "b"})),
        ttft=0.1,
        duration=0.2,
    )
    scripted = ScriptedLLM([rule])

    async def main() -> list[Chunk]:
        return await _consume(scripted, user_ctx("bye"))

    chunks = run_virtual(main())
    assert len(chunks) == 1
    at, content, calls = chunks[0]
    assert at == pytest.approx(0.2, abs=TOL)
    assert not content
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("hang_up", {}),
        ("log", {"a": "b"}),
    ]


def test_requests_record_every_call_with_its_context() -> None:
    scripted = ScriptedLLM([ORDER, AFTER_LOOKUP])

    async def main() -> None:
        await _consume(scripted, user_ctx("hello", "my order please"))
        await _consume(scripted, tool_ctx("my order please", "lookup_order"))
        await _consume(scripted, user_ctx("hello", "my order please"))

    run_virtual(main())
    got = [
        (round(r.at, 2), r.user_texts, r.last_user_text, r.last_tool, r.reply, r.tool_calls)
        for r in scripted.requests
    ]
    assert got == [
        (
            0.0,
            ("hello", "my order please"),
            "my order please",
            None,
            "Your order ships today.",
            ("lookup_order",),
        ),
        (1.0, ("my order please",), None, "lookup_order", "It is on its way.", ()),
        # a pure function of the context: the same context gets the same answer
        (
            1.5,
            ("hello", "my order please"),
            "my order please",
            None,
            "Your order ships today.",
            ("lookup_order",),
        ),
    ]


def test_fallback_stream_uses_fallback_ttft() -> None:
    scripted = ScriptedLLM(fallback_ttft=0.25)

    async def main() -> list[Chunk]:
        return await _consume(scripted, user_ctx("two words"))

    chunks = run_virtual(main())
    assert "".join(c or "" for _, c, _ in chunks) == "Sure: two words."
    assert {round(t, 2) for t, _, _ in chunks} == {0.25}


# --- TTS --------------------------------------------------------------------------------------


def test_duration_of_text() -> None:
    tts = ScriptedTTS()
    assert tts.duration_of("Hi.") == pytest.approx(0.3)
    assert tts.duration_of("  Hello there, how are you?  ") == pytest.approx(25 / 15)
    assert ScriptedTTS(seconds_per_char=0.1, min_seconds=0.0).duration_of("abcd") == pytest.approx(
        0.4
    )


def _synthesize(tts: ScriptedTTS, texts: list[str]) -> list[tuple[float, float, np.ndarray]]:
    """Per text: loop time of the first audio, time synthesis finished, all samples."""

    async def main() -> list[tuple[float, float, np.ndarray]]:
        loop = asyncio.get_running_loop()
        results = []
        for text in texts:
            requested = loop.time()
            first: float | None = None
            parts = []
            async with tts.synthesize(text) as stream:
                async for ev in stream:
                    if first is None:
                        first = loop.time()
                    assert ev.frame.sample_rate == SAMPLE_RATE
                    assert ev.frame.num_channels == 1
                    parts.append(np.frombuffer(ev.frame.data, dtype=np.int16))
            assert first is not None
            results.append((first - requested, loop.time(), np.concatenate(parts)))
        return results

    return run_virtual(main())


def test_synthesize_produces_audio_of_duration_with_sentence_markers() -> None:
    tts = ScriptedTTS()
    texts = ["Hello there, how are you?", "Ok."]
    results = _synthesize(tts, texts)

    assert tts.sentences == {1: "Hello there, how are you?", 2: "Ok."}
    assert tts.synthesized_at[1] == pytest.approx(0.0, abs=TOL)
    assert tts.synthesized_at[2] == pytest.approx(results[0][1], abs=TOL)

    for sentence_id, (text, (ttfb, _, samples)) in enumerate(
        zip(texts, results, strict=True), start=1
    ):
        frames = round(tts.duration_of(text) / 0.01)
        assert ttfb == pytest.approx(0.15, abs=TOL)
        marked = frames * FRAME_SAMPLES
        # livekit's emitter may close the segment with a 10 ms silent marker frame
        assert len(samples) in (marked, marked + FRAME_SAMPLES)
        assert not samples[marked:].any()
        assert marked / SAMPLE_RATE == pytest.approx(tts.duration_of(text), abs=0.01)
        assert read_markers(samples) == [
            AudioMarker(KIND_AGENT, sentence_id, i, 0, frames) for i in range(frames)
        ]
        # every 10 ms of the sentence starts with its marker
        assert all(
            read_markers(samples[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES])
            == [AudioMarker(KIND_AGENT, sentence_id, i, 0, frames)]
            for i in range(frames)
        )
    assert len(read_markers(results[0][2])) == 167
    assert len(read_markers(results[1][2])) == 30


def test_synthesized_audio_played_out_reports_the_sentence_heard() -> None:
    tts = ScriptedTTS(ttfb=0.1)
    text = "This sentence lasts two seconds."  # 32 chars: 2.13 s

    async def main() -> tuple[float, PlayoutAudioOutput]:
        loop = asyncio.get_running_loop()
        out = PlayoutAudioOutput(clock=loop.time)
        async with tts.synthesize(text) as stream:
            async for ev in stream:
                await out.capture_frame(ev.frame)
        out.flush()
        await out.wait_for_playout()
        return loop.time(), out

    finished_at, out = run_virtual(main())
    duration = tts.duration_of(text)
    assert duration == pytest.approx(32 / 15)
    assert finished_at == pytest.approx(0.1 + duration, abs=TOL)
    [segment] = out.segments
    assert list(segment.sentences) == [1]
    start, heard, length = segment.sentences[1]
    assert start == pytest.approx(0.0, abs=1e-6)
    assert heard == pytest.approx(duration, abs=0.011)
    assert length == pytest.approx(duration, abs=0.011)


def test_tts_identity() -> None:
    tts = ScriptedTTS()
    assert tts.model == "scripted-marker-tts"
    assert tts.provider == "resilient_agent.testing"
    assert tts.sample_rate == SAMPLE_RATE
    assert tts.capabilities.streaming is False
