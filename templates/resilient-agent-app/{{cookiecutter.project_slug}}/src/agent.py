"""{{ cookiecutter.project_name }}: a LiveKit voice agent on ResilientAgent.

Run ``python src/agent.py console`` to talk to it in the terminal, ``dev`` to join LiveKit rooms
while developing, ``start`` in production (see README.md).
"""

from __future__ import annotations

import structlog
from dotenv import load_dotenv
from livekit.agents import (
    AgentServer,
    AgentSession,
    JobContext,
    JobProcess,
    RunContext,
    TurnHandlingOptions,
    cli,
    function_tool,
    inference,
)
from livekit.plugins import cartesia, deepgram, google
from resilient_agent import ResilientAgent, end_call_tool, prewarm_plugins

from logging_setup import configure_logging

load_dotenv(".env.local")

logger = structlog.get_logger("agent")

AGENT_NAME = "{{ cookiecutter.agent_name }}"
LLM_MODEL = "gemini-3.5-flash"
FAREWELL = "Thanks for calling. Goodbye!"
INSTRUCTIONS = """\
You are a helpful voice assistant. The user talks to you by voice, even if you see text.
Answer in one or two short sentences, in plain words: no markdown, lists, emojis or symbols.
Use your tools for facts you do not know. When the user says goodbye or asks to hang up,
call end_call and say nothing else: it says the farewell for you."""


class Assistant(ResilientAgent):
    """The assistant's instructions and tools; the session brings the models.

    Models are chosen in the entrypoint, so tests build this class without any API key and run
    it on scripted models (``resilient_agent.testing``).
    """

    def __init__(self) -> None:
        super().__init__(
            instructions=INSTRUCTIONS,
            # hangs up only after the farewell was heard; a caller who talks over it keeps the
            # call. Deleting the room is what actually ends a SIP call.
            tools=[end_call_tool(farewell=FAREWELL, delete_room=True)],
        )

    @function_tool
    async def lookup_weather(self, context: RunContext, location: str) -> str:
        """Look up the current weather in a location.

        Args:
            location: The city or place, e.g. "Paris".
        """
        logger.info("looking up weather", location=location)
        # Replace with a real weather API. If it raises, the LLM gets a ToolError saying the
        # lookup failed (resilient-agent converts the exception), so it can tell the caller.
        return f"Sunny and 21 degrees Celsius in {location}."


def prewarm(proc: JobProcess) -> None:
    """Run once in every job process, before its first call."""
    configure_logging()
    # the Silero weights ship inside the livekit-local-inference wheel: nothing to download
    proc.userdata["vad"] = inference.VAD()
    # a broken middleware plugin (RESILIENT_AGENT_PLUGINS) fails here, not in a live call
    prewarm_plugins()


server = AgentServer(setup_fnc=prewarm)


@server.rtc_session(agent_name=AGENT_NAME)
async def entrypoint(ctx: JobContext) -> None:
    """Answer one call in ``ctx.room``."""
    fields = {"room": ctx.job.room.name, "job_id": ctx.job.id}
    # LiveKit's own records carry these through log_context_fields, the app's through
    # contextvars; bound before session.start() so the session's tasks inherit them
    ctx.log_context_fields = fields
    structlog.contextvars.bind_contextvars(**fields)

    session = AgentSession(
        stt=deepgram.STT(model="nova-3", language="en-US"),
        llm=google.LLM(model=LLM_MODEL),
        tts=cartesia.TTS(model="sonic-3"),
        vad=ctx.proc.userdata["vad"],
        # audio-based end-of-turn model: runs locally (v1-mini) or on LiveKit Cloud (v1)
        turn_handling=TurnHandlingOptions(turn_detection=inference.TurnDetector()),
    )
    await session.start(agent=Assistant(), room=ctx.room)
    await ctx.connect()
    logger.info("call started")
    # speak first: callers expect a voice when the line opens
    session.generate_reply(instructions="Greet the caller and offer your help.")


if __name__ == "__main__":
    cli.run_app(server)
