"""Real speech audio for runs with the embedded ``livekit.agents.inference.VAD``.

Two short espeak-ng recordings ship with the package (16 kHz mono, made with
``espeak-ng -v en-us -s 150`` and ``sox -r 16000 -c 1 -b 16``); :func:`espeak` makes more when
Debian's ``espeak-ng`` is installed.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import wave
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from types import MappingProxyType

import numpy as np

from .audio import SAMPLE_RATE

__all__ = ["BUNDLED", "bundled_speech", "espeak", "load_wav"]

BUNDLED: Mapping[str, str] = MappingProxyType(
    {
        "table_for_two": "do you have a table for two tonight",
        "thank_you": "great thank you very much",
    }
)
"""Bundled recording name to the words it says."""


def load_wav(path: Path) -> np.ndarray:
    """Read a 16 kHz mono 16-bit WAV file as int16 samples.

    Raises:
        ValueError: The file is not 16 kHz mono 16-bit PCM; the message says how to convert it.
    """
    with wave.open(str(path), "rb") as wav:
        rate, channels, width = wav.getframerate(), wav.getnchannels(), wav.getsampwidth()
        if (rate, channels, width) != (SAMPLE_RATE, 1, 2):
            raise ValueError(
                f"{path}: expected 16000 Hz mono 16-bit PCM, got {rate} Hz, {channels} channel(s),"
                f" {8 * width}-bit; convert it with `sox IN -r 16000 -c 1 -b 16 OUT.wav`"
            )
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype=np.int16).copy()


def bundled_speech(name: str) -> np.ndarray:
    """One of the :data:`BUNDLED` recordings."""
    if name not in BUNDLED:
        raise ValueError(f"unknown bundled speech {name!r}; choose one of {sorted(BUNDLED)}")
    resource = resources.files(__package__).joinpath("speech", f"{name}.wav")
    with resources.as_file(resource) as path:
        return load_wav(path)


def espeak(text: str, *, voice: str = "en-us", words_per_minute: int = 150) -> np.ndarray:
    """Synthesize ``text`` with espeak-ng and resample it to 16 kHz int16.

    Raises:
        RuntimeError: ``espeak-ng`` is not installed (``apt-get install espeak-ng``).
    """
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise RuntimeError("espeak-ng is not installed: run `apt-get install espeak-ng`")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "speech.wav"
        subprocess.run(
            [binary, "-v", voice, "-s", str(words_per_minute), "-w", str(out), text],
            check=True,
            capture_output=True,
        )
        with wave.open(str(out), "rb") as wav:
            rate = wav.getframerate()
            samples = np.frombuffer(wav.readframes(wav.getnframes()), dtype=np.int16)
    if rate == SAMPLE_RATE:
        return samples.copy()
    duration = len(samples) / rate
    target = np.linspace(0.0, duration, int(duration * SAMPLE_RATE), endpoint=False)
    source = np.arange(len(samples)) / rate
    return np.interp(target, source, samples.astype(np.float64)).astype(np.int16)
