"""PocketSphinxSTT on espeak-ng audio: streaming, flushes, offline recognize, bad input."""

from __future__ import annotations

import asyncio
import importlib
import os
import shutil
from typing import Any

import numpy as np
import pytest
from livekit import rtc
from livekit.agents import stt

from resilient_agent.testing import pocketsphinx_stt
from resilient_agent.testing.clock import run_virtual
from resilient_agent.testing.pocketsphinx_stt import PocketSphinxSTT


def _has(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


_NEEDS = []
if not _has("pocketsphinx"):
    _NEEDS.append("pocketsphinx (pip install 'resilient-agent[speech]')")
if shutil.which("espeak-ng") is None:
    _NEEDS.append("espeak-ng (apt-get install espeak-ng)")
if _NEEDS and os.environ.get("CI"):
    raise RuntimeError(f"CI must install {', '.join(_NEEDS)} (see .ci/run)")
pytestmark = pytest.mark.skipif(bool(_NEEDS), reason=f"needs {', '.join(_NEEDS)}")

INTERIM = stt.SpeechEventType.INTERIM_TRANSCRIPT
FINAL = stt.SpeechEventType.FINAL_TRANSCRIPT
PHRASES = ("do you have parking", "please book a table for eight", "okay goodbye")
FRAME = 160


def _speech(text: str) -> np.ndarray:
    from resilient_agent.testing.speech import espeak

    return espeak(text)


def _silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * 16_000), dtype=np.int16)


def _frames(samples: np.ndarray) -> list[rtc.AudioFrame]:
    usable = len(samples) // FRAME * FRAME
    return [
        rtc.AudioFrame(samples[i : i + FRAME].tobytes(), 16_000, 1, FRAME)
        for i in range(0, usable, FRAME)
    ]


@pytest.fixture(scope="module")
def recognizer() -> PocketSphinxSTT:
    return PocketSphinxSTT(phrases=PHRASES)


Event = tuple[float, stt.SpeechEventType, str]


def _stream(
    recognizer: PocketSphinxSTT,
    samples: np.ndarray,
    *,
    flush_at: float | None = None,
    end_input: bool = True,
) -> list[Event]:
    """Push ``samples`` in real-time 10 ms frames on virtual time; the events with their time."""

    async def main() -> list[Event]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        stream = recognizer.stream()
        events: list[Event] = []

        async def push() -> None:
            for n, frame in enumerate(_frames(samples)):
                stream.push_frame(frame)
                await asyncio.sleep(0.01)
                if flush_at is not None and abs((n + 1) * 0.01 - flush_at) < 0.005:
                    stream.flush()
            if end_input:
                stream.end_input()
            else:
                await asyncio.sleep(1.0)
                await stream.aclose()

        async def read() -> None:
            async for ev in stream:
                events.append((round(loop.time() - t0, 3), ev.type, ev.alternatives[0].text))

        await asyncio.gather(push(), read())
        return events

    return run_virtual(main())


def test_streams_interim_then_final_with_the_words(recognizer: PocketSphinxSTT) -> None:
    audio = np.concatenate([_silence(0.5), _speech("do you have parking"), _silence(1.0)])
    events = _stream(recognizer, audio)
    finals = [e for e in events if e[1] == FINAL]
    interims = [e for e in events if e[1] == INTERIM]
    assert [text for _, _, text in finals] == ["do you have parking"]
    assert interims and all(at < finals[0][0] for at, _, _ in interims)
    # interim hypotheses grow with the audio heard
    assert len(interims[0][2].split()) < len(interims[-1][2].split())
    # the final comes after the speech ends (0.5 s + its length), within the endpoint window
    speech_end = 0.5 + len(_speech("do you have parking")) / 16_000
    assert speech_end <= finals[0][0] <= speech_end + 0.8


def test_runs_are_deterministic_on_virtual_time(recognizer: PocketSphinxSTT) -> None:
    audio = np.concatenate([_silence(0.3), _speech("please book a table for eight"), _silence(1.0)])
    assert _stream(recognizer, audio) == _stream(recognizer, audio)


def test_two_utterances_give_two_finals(recognizer: PocketSphinxSTT) -> None:
    audio = np.concatenate(
        [
            _speech("do you have parking"),
            _silence(1.0),
            _speech("please book a table for eight"),
            _silence(1.0),
        ]
    )
    finals = [text for _, kind, text in _stream(recognizer, audio) if kind == FINAL]
    assert finals == ["do you have parking", "please book a table for eight"]


def test_flush_makes_the_speech_so_far_final_at_once(recognizer: PocketSphinxSTT) -> None:
    speech = _speech("please book a table for eight")
    cut = 0.2 + len(speech) / 16_000 * 0.6
    audio = np.concatenate([_silence(0.2), speech, _silence(1.0)])
    events = _stream(recognizer, audio, flush_at=round(cut, 2))
    finals = [(at, text) for at, kind, text in events if kind == FINAL]
    # the first final comes at the flush (within one 10 ms frame), before the speech ended
    assert finals[0][0] == pytest.approx(cut, abs=0.02)
    assert finals[0][1] and "eight" not in finals[0][1]


def test_end_of_input_flushes_speech_under_way(recognizer: PocketSphinxSTT) -> None:
    # no trailing silence: only the end of input can finish the utterance
    audio = np.concatenate([_silence(0.2), _speech("do you have parking")])
    finals = [text for _, kind, text in _stream(recognizer, audio) if kind == FINAL]
    assert finals == ["do you have parking"]


def test_flush_with_nothing_left_in_the_endpointer(recognizer: PocketSphinxSTT) -> None:
    # espeak-ng's recording ends in a short silence: at the end of input the endpointer may
    # still be in speech with no audio left to give
    for stt_under_test in (PocketSphinxSTT(), recognizer):
        for text in ("please book a table for eight", "do you have a table for two tonight"):
            assert isinstance(stt_under_test.transcribe_samples(_speech(text)), str)


def test_silence_gives_no_transcript(recognizer: PocketSphinxSTT) -> None:
    assert _stream(recognizer, _silence(1.5)) == []


def test_transcribe_samples_matches_the_stream(recognizer: PocketSphinxSTT) -> None:
    audio = np.concatenate([_silence(0.3), _speech("please book a table for eight"), _silence(0.5)])
    streamed = " ".join(t for _, kind, t in _stream(recognizer, audio) if kind == FINAL)
    assert recognizer.transcribe_samples(audio) == streamed


def test_offline_recognize(recognizer: PocketSphinxSTT) -> None:
    audio = np.concatenate([_silence(0.3), _speech("do you have parking"), _silence(0.5)])

    async def main() -> stt.SpeechEvent:
        return await recognizer.recognize(_frames(audio))

    event = run_virtual(main())
    assert event.type == FINAL
    assert event.alternatives[0].text == "do you have parking"


def test_general_model_without_phrases_mishears_but_hears() -> None:
    general = PocketSphinxSTT()
    assert general.model == "pocketsphinx-en-us"
    text = general.transcribe_samples(np.concatenate([_speech("do you have parking"), _silence(1)]))
    assert text  # the general model hears words, not necessarily these


def test_cepstral_mean_is_applied(recognizer: PocketSphinxSTT) -> None:
    mean = recognizer.measure_cepstral_mean(_speech("okay goodbye do you have parking"))
    assert len(mean.split(",")) == 13
    adapted = PocketSphinxSTT(phrases=PHRASES, cepstral_mean=mean)
    audio = np.concatenate([_speech("do you have parking"), _silence(1)])
    assert adapted.transcribe_samples(audio) == "do you have parking"


def test_unknown_phrase_word_is_named_at_construction() -> None:
    with pytest.raises(ValueError, match="zzyzxq"):
        PocketSphinxSTT(phrases=["book zzyzxq now"])
    with pytest.raises(ValueError, match="endpoint_silence"):
        PocketSphinxSTT(endpoint_silence=5.0)


def test_missing_pocketsphinx_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = importlib.import_module

    def fake_import(name: str, *args: Any) -> Any:
        if name == "pocketsphinx":
            raise ImportError("No module named 'pocketsphinx'")
        return real_import(name, *args)

    monkeypatch.setattr(pocketsphinx_stt.importlib, "import_module", fake_import)
    with pytest.raises(ImportError, match=r"resilient-agent\[speech\]"):
        PocketSphinxSTT()
