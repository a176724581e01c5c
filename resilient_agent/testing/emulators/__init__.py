"""Local emulators of the providers' wire protocols, for the real plugins to run against.

Each emulator is an aiohttp server on 127.0.0.1 (an ephemeral port) that runs in the call's own
event loop, so on the lab's virtual clock a call with the real ``livekit-plugins-*`` objects
replays exactly. STT emulators transcribe the lab's marked caller words from the PCM that
reached them; the TTS emulator speaks the lab's marked audio for the text it received; LLM
emulators serialise the scenario's scripted replies in the provider's wire shape. See
docs/provider-emulators.md for each protocol and the assumptions made where the providers' docs
leave a behaviour open.
"""

from __future__ import annotations

from ._server import EmulatorServer
from .cartesia import CartesiaEmulator
from .deepgram import DeepgramEmulator, DeepgramFaults
from .gemini import GeminiEmulator
from .gemini_live import GeminiLiveEmulator, GeminiLiveFaults
from .openai import OpenAIEmulator
from .openai_realtime import OpenAIRealtimeEmulator, OpenAIRealtimeFaults, ScheduledUtterance

__all__ = [
    "CartesiaEmulator",
    "DeepgramEmulator",
    "DeepgramFaults",
    "EmulatorServer",
    "GeminiEmulator",
    "GeminiLiveEmulator",
    "GeminiLiveFaults",
    "OpenAIEmulator",
    "OpenAIRealtimeEmulator",
    "OpenAIRealtimeFaults",
    "ScheduledUtterance",
]
