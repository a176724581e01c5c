"""The caller's questions a tool reply would answer again on a provider's wire.

livekit keeps a chat context in time order, but its provider formats (OpenAI's chat completions,
Gemini's contents) move each tool's output next to its call. A tool whose call came before a
question of the caller's, and whose output came after it, therefore reads on the wire as a
context that *ends in that question*: the model answers it. When another reply, started for that
very question, is still being generated or played (its text is not in the context yet), the
caller hears the answer twice (``control/question_as_a_long_tool_ends`` on a real plugin). The
scripted LLM, which reads the context in time order, never showed it.

:func:`questions_answered_elsewhere` finds those questions, so the tool reply's inference can
go without them and voice the tool's result; the reply already under way answers them.

The caller can also ask after the tool's output, while its protected preamble still plays: a
typed message then gets a reply of its own, queued behind the preamble, and livekit's tool reply,
made when the preamble ends, takes in the messages added meanwhile, so its context ends in that
question in time order too. :func:`questions_after_new_results` finds those. A question spoken
over the protected preamble gets no reply of its own (livekit skips the turn): the tool reply
answers it, as livekit means it to.
"""

from __future__ import annotations

from collections.abc import Collection

from livekit.agents.llm import ChatContext

__all__ = [
    "question_answered",
    "questions_after_new_results",
    "questions_answered",
    "questions_answered_elsewhere",
]


def questions_answered(chat_ctx: ChatContext) -> list[str]:
    """The ids of the user messages ``chat_ctx`` ends in, in order: an inference answers them all.

    System messages (instructions) are skipped; any other item ends the run.
    """
    found: list[str] = []
    for item in reversed(chat_ctx.items):
        if item.type == "message" and item.role == "system":
            continue
        if not (item.type == "message" and item.role == "user"):
            break
        found.append(item.id)
    return found[::-1]


def question_answered(chat_ctx: ChatContext) -> str | None:
    """The id of the user message an inference of ``chat_ctx`` answers, if it ends in one.

    The last item that is not a system message (instructions) decides, in the context's own
    order (time order): livekit's placeholder output for a tool still running is created with its
    call, before the question.
    """
    for item in reversed(chat_ctx.items):
        if item.type == "message" and item.role == "system":
            continue
        if item.type == "message" and item.role == "user":
            return item.id
        return None
    return None


def questions_answered_elsewhere(chat_ctx: ChatContext, answering: Collection[str]) -> list[str]:
    """The user messages a provider's format would leave last although another reply answers them.

    A user message is one when another reply answers it (``answering``, which the caller
    decides: in :class:`ContextIntegrity`, a reply started for it that says something), no
    assistant message follows it in ``chat_ctx``, and the output of a tool called
    before it comes after it: on the wire that output moves up next to its call, and the
    context ends in the question.

    Args:
        chat_ctx: The inference's context, in livekit's order.
        answering: Ids of the user messages another reply answers.
    """
    called_at: dict[str, int] = {}
    questions: dict[str, int] = {}
    last_answer = -1
    found: list[str] = []
    for position, item in enumerate(chat_ctx.items):
        if item.type == "function_call":
            called_at.setdefault(item.call_id, position)
        elif item.type == "message" and item.role == "assistant":
            last_answer = position
        elif item.type == "message" and item.role == "user" and item.id in answering:
            questions[item.id] = position
        elif item.type == "function_call_output" and item.call_id in called_at:
            call = called_at[item.call_id]
            found.extend(q for q, at in questions.items() if call < at and q not in found)
    return [q for q in found if questions[q] > last_answer]


def questions_after_new_results(chat_ctx: ChatContext, new_results: Collection[str]) -> list[str]:
    """The user messages ``chat_ctx`` ends in after a tool's result no earlier inference carried.

    The first inference to carry a tool's result after the last assistant message is that tool's
    reply (or the reply to the turn that interrupted its preamble); a later one carrying it (a
    retried reply) is not.

    Args:
        chat_ctx: The inference's context, in livekit's order.
        new_results: Ids of the tool outputs in ``chat_ctx`` no earlier inference carried; the
            placeholder livekit gives a call still running is no result.
    """
    questions = questions_answered(chat_ctx)
    if not questions:
        return []
    first_question = next(i for i, item in enumerate(chat_ctx.items) if item.id == questions[0])
    for item in reversed(chat_ctx.items[:first_question]):
        if item.type == "message" and item.role == "assistant":
            return []
        if item.type == "function_call_output" and item.id in new_results:
            return questions
    return []
