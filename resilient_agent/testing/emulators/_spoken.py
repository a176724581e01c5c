"""The sentences a realtime emulator speaks: their length by the scripted TTS's rule, their ids."""

from __future__ import annotations

import asyncio

from ..tts import spoken_seconds

__all__ = ["SpokenSentences"]


class SpokenSentences:
    """What an emulator that synthesizes its own replies records of each sentence it speaks.

    The emulator sets the four attributes in its constructor.
    """

    seconds_per_char: float
    min_seconds: float
    sentences: dict[int, str]
    synthesized_at: dict[int, float]

    def duration_of(self, text: str) -> float:
        """How long the audio for ``text`` lasts (the scripted TTS's rule)."""
        return spoken_seconds(
            text, seconds_per_char=self.seconds_per_char, min_seconds=self.min_seconds
        )

    def new_sentence(self, text: str) -> int:
        """Record ``text`` as the next sentence spoken and return its id."""
        sentence_id = len(self.sentences) + 1
        self.sentences[sentence_id] = text.strip()
        self.synthesized_at[sentence_id] = asyncio.get_running_loop().time()
        return sentence_id
