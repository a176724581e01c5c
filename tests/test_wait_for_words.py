"""WaitForCaller past ``wait_s``: a caller still saying words is waited for, up to ``max_wait_s``.

Evidence of words is the session's STT hearing new ones (a listening stream of it while livekit
feeds the STT silence); a line that is only loud (noise) or quiet (a stuck VAD) is no evidence,
and the speech plays at ``wait_s`` as before.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

import pytest
from livekit.agents import Agent, stt
from resilient_agent.middleware import default_middleware
from resilient_agent.middleware.caller_words import WORDS_RECENT_S, CallerWords
from resilient_agent.middleware.wait_for_caller import RACE, WaitForCaller
from resilient_agent.middleware.wait_options import DEFAULT_MAX_WAIT_S
from structlog.testing import capture_logs

from resilient_agent import MiddlewareError, ResilientAgent
from resilient_agent.lab.catalog import agents, scenarios
from resilient_agent.lab.fuzz import AT_WAIT_BOUND, contracts_broken
from resilient_agent.testing import CallOutcome, NoiseWindow, Scenario, Utterance, run_scenario
from resilient_agent.testing.contracts import protected_talk_over
from tests.test_wait_for_caller import LONG_TALKER, hold_message


def catalog(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


def events(outcome: CallOutcome) -> list[dict[str, Any]]:
    return [e for e in outcome.race_events if e["kind"] == RACE]


def actions(outcome: CallOutcome) -> list[tuple[str | None, float]]:
    return [(e["action"], e["at_s"]) for e in events(outcome)]


def waiting(**options: Any) -> type[ResilientAgent]:
    """ResilientAgent whose WaitForCaller takes ``options``: a fresh one for each agent."""

    class Configured(ResilientAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            chain = [
                WaitForCaller(**options) if isinstance(mw, WaitForCaller) else mw
                for mw in default_middleware()
            ]
            super().__init__(*args, middleware=chain, **kwargs)

    return Configured


# WaitForCaller as it was before the extension: it never waits past wait_s
AT_THREE_SECONDS = waiting(max_wait_s=3.0)
LONG_TALKERS = [
    # (scenario, the hold starts, the caller's last word)
    ("talk_over/caller_keeps_talking_over_hold_message", 4.0, 9.2),
    ("talk_over/caller_keeps_talking_over_filler", 3.51, 7.75),
    ("talk_over/caller_keeps_talking_through_handoff_hold", 3.45, 8.8),
]


@pytest.mark.parametrize(("name", "held_at", "last_word"), LONG_TALKERS)
def test_a_caller_still_saying_words_is_waited_for_until_they_stop(
    name: str, held_at: float, last_word: float
) -> None:
    _, outcome = run_scenario(catalog(name), ResilientAgent)
    assert outcome.passed, outcome.reasons
    assert outcome.talked_over_s == 0.0
    assert outcome.lost_words == 0
    # held, extended at the 3 s bound, released when the VAD ends their speech (0.55 s)
    assert actions(outcome) == [
        (None, pytest.approx(held_at, abs=0.01)),
        ("extended_wait", pytest.approx(held_at + 3.0, abs=0.01)),
        ("caller_stopped", pytest.approx(last_word + 0.55, abs=0.01)),
    ]
    extended = events(outcome)[1]
    assert extended["why"] == "caller_still_saying_words"
    assert extended["wait_s"] == 3.0 and extended["max_wait_s"] == DEFAULT_MAX_WAIT_S
    assert events(outcome)[2]["extended"] is True


@pytest.mark.parametrize(("name", "held_at", "last_word"), LONG_TALKERS)
def test_without_the_extension_the_speech_plays_over_the_caller_at_the_bound(
    name: str, held_at: float, last_word: float
) -> None:
    _, outcome = run_scenario(catalog(name), AT_THREE_SECONDS)
    assert contracts_broken(outcome) == (AT_WAIT_BOUND,), outcome.reasons
    assert ("spoke_at_bound", pytest.approx(held_at + 3.0, abs=0.01)) in actions(outcome)


@pytest.mark.parametrize("name", [n for n, _, _ in LONG_TALKERS[:2]])
def test_plain_agent_starts_the_speech_over_the_long_talker(name: str) -> None:
    world, outcome = run_scenario(catalog(name), Agent)
    assert not outcome.passed
    assert protected_talk_over(world) != []


def test_the_hold_message_waited_for_plays_whole_once_the_caller_stopped() -> None:
    scenario = catalog("talk_over/caller_keeps_talking_over_hold_message")
    world, _ = run_scenario(scenario, ResilientAgent)
    segment = hold_message(world)
    assert len(segment.runs) == 1
    assert segment.runs[0].started_at == pytest.approx(9.75, abs=0.01)
    assert segment.played == pytest.approx(len(agents.HOLD_MESSAGE) / 15, abs=0.05)
    assert not segment.interrupted


def test_past_max_wait_s_the_policy_applies_and_the_fuzzer_counts_it_apart() -> None:
    # the caller talks from 3.7 s to 9.0 s; the hold starts at 4.0 s and may last 5 s
    scenario = dataclasses.replace(LONG_TALKER, talk_over_tolerance=None)
    world, outcome = run_scenario(scenario, waiting(max_wait_s=5.0))
    assert actions(outcome) == [
        (None, pytest.approx(4.0, abs=0.01)),
        ("extended_wait", pytest.approx(7.0, abs=0.01)),
        ("spoke_at_bound", pytest.approx(9.0, abs=0.01)),
    ]
    assert events(outcome)[2]["held_s"] == pytest.approx(5.0, abs=0.01)
    assert hold_message(world).runs[0].started_at == pytest.approx(9.0, abs=0.01)
    assert outcome.lost_words == 0
    # a filler held from 3.51 s for a caller who talks to 7.75 s, with a cap at 7.51 s
    filler = catalog("talk_over/caller_keeps_talking_over_filler")
    graded = run_scenario(filler, waiting(max_wait_s=4.0))[1]
    assert contracts_broken(graded) == (AT_WAIT_BOUND,), graded.reasons


def test_skip_applies_past_max_wait_s() -> None:
    world, outcome = run_scenario(LONG_TALKER, waiting(past_bound="skip", max_wait_s=4.0))
    assert [a for a, _ in actions(outcome)] == [None, "extended_wait", "skipped_at_bound"]
    assert events(outcome)[2]["at_s"] == pytest.approx(8.0, abs=0.01)
    segment = hold_message(world)
    assert segment.interrupted and segment.runs == []
    assert outcome.talked_over_s == 0.0


# The booking call of tool_gap/gap_protected_say, with a TV on the caller's line from 3.7 s:
# the VAD hears speech, the line is loud, and there are no words in it.
NOISE = dataclasses.replace(
    catalog("tool_gap/gap_protected_say"),
    name="test/noise_over_hold_message",
    utterances=(catalog("tool_gap/gap_protected_say").utterances[0],),
    noise=(NoiseWindow(3.7, 12.0),),
    sweep=None,
    duration=25.0,
    talk_over_tolerance=None,
)


def test_a_noisy_line_without_words_plays_the_speech_at_wait_s() -> None:
    world, outcome = run_scenario(NOISE, ResilientAgent)
    assert actions(outcome) == [
        (None, pytest.approx(4.0, abs=0.01)),
        ("spoke_at_bound", pytest.approx(7.0, abs=0.01)),
    ]
    segment = hold_message(world)
    assert segment.runs[0].started_at == pytest.approx(7.0, abs=0.01)
    assert segment.played == pytest.approx(len(agents.HOLD_MESSAGE) / 15, abs=0.05)
    assert not segment.interrupted
    assert not world.close_deadlocked and world.unfinished_handles == ()


def test_noise_after_the_last_words_ends_the_extension_soon_after_them() -> None:
    # the caller talks over the hold message to 6.5 s, then a TV keeps the VAD in "speaking"
    scenario = dataclasses.replace(
        NOISE,
        utterances=(NOISE.utterances[0], Utterance(3.7, 6.5, "actually make it nine instead")),
        noise=(NoiseWindow(6.5, 12.0),),
    )
    world, outcome = run_scenario(scenario, ResilientAgent)
    _held, (extended, at_bound), (action, released) = actions(outcome)
    assert extended == "extended_wait" and at_bound == pytest.approx(7.0, abs=0.01)
    # the STT heard the last word about mid-word (6.2 s): evidence ages out WORDS_RECENT_S later
    assert action == "spoke_at_bound"
    assert 7.0 < released <= 6.5 + WORDS_RECENT_S
    assert hold_message(world).runs[0].started_at == pytest.approx(released, abs=0.01)
    assert outcome.lost_words == 0


def test_when_livekit_lets_the_stt_hear_the_caller_its_transcripts_are_the_evidence() -> None:
    # with discard_audio_if_uninterruptible=False the session's own STT hears the caller
    scenario = dataclasses.replace(
        LONG_TALKER,
        session_options={"interruption": {"discard_audio_if_uninterruptible": False}},
    )
    _, outcome = run_scenario(scenario, ResilientAgent)
    assert actions(outcome) == [
        (None, pytest.approx(4.0, abs=0.01)),
        ("extended_wait", pytest.approx(7.0, abs=0.01)),
        ("caller_stopped", pytest.approx(9.55, abs=0.01)),
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_wait_s": -1.0}, "max_wait_s=-1.0 is out of range"),
        ({"max_wait_s": 31.0}, "max_wait_s=31.0 is out of range"),
        ({"max_wait_s": "long"}, "max_wait_s='long' is a str, not a number"),
        ({"wait_s": 5.0, "max_wait_s": 4.0}, "max_wait_s=4.0 is below wait_s=5"),
        (
            {"tools": {"end_call": {"wait_s": 5.0, "max_wait_s": 4.0}}},
            "tools['end_call'].max_wait_s=4.0 is below tools['end_call'].wait_s=5",
        ),
        (
            {"tools": {"end_call": {"max_wait_s": 2.0}}},
            "tools['end_call'].max_wait_s=2.0 is below wait_s=3",
        ),
        (
            {"max_wait_s": 10.0, "tools": {"end_call": {"wait_s": 12.0}}},
            "max_wait_s=10.0 is below tools['end_call'].wait_s=12",
        ),
        ({"tools": {"end_call": {"max_wait_s": 60.0}}}, "tools['end_call'].max_wait_s=60.0 is out"),
    ],
)
def test_max_wait_s_is_validated_at_construction(options: dict[str, Any], message: str) -> None:
    with pytest.raises(MiddlewareError, match=re.escape(message)) as raised:
        WaitForCaller(**options)
    assert "Fix:" in str(raised.value)


def test_max_wait_s_defaults_and_per_tool_resolution() -> None:
    assert WaitForCaller().max_wait_s == DEFAULT_MAX_WAIT_S
    # a wait_s longer than the default cap is never cut short by it
    assert WaitForCaller(wait_s=20.0).max_wait_s == 20.0
    wait = WaitForCaller(
        tools={"end_call": {"wait_s": 20.0}, "read_terms": {"max_wait_s": 3.0}, "x": {}}
    )
    assert wait._options_for("end_call")["max_wait_s"] == 20.0
    assert wait._options_for("read_terms") == {
        "wait_s": 3.0,
        "past_bound": "speak",
        "max_wait_s": 3.0,
    }
    assert wait._options_for("x")["max_wait_s"] == DEFAULT_MAX_WAIT_S
    # the given options are kept as given
    assert wait.tools["end_call"] == {"wait_s": 20.0}
    capped = WaitForCaller(max_wait_s=8.0, tools={"end_call": {"wait_s": 5.0}})
    assert capped._options_for("end_call")["max_wait_s"] == 8.0


def test_an_unchanged_transcript_is_no_evidence_of_new_words() -> None:
    words = CallerWords()
    assert not words.saying_words(0.0)
    words.heard("make it", 1.0)
    words.heard("make it", 2.0)  # an interim resent unchanged
    words.heard("make it", 2.1)  # the final that confirms it
    words.heard("  ", 2.2)
    assert words.last_words_at == 1.0
    assert words.saying_words(1.0 + WORDS_RECENT_S)
    assert not words.saying_words(1.01 + WORDS_RECENT_S)
    words.heard("make it nine", 3.0)
    assert words.last_words_at == 3.0
    words.forget()
    assert not words.saying_words(3.0)


class _BrokenSTT(stt.STT[Any]):
    def __init__(self) -> None:
        super().__init__(capabilities=stt.STTCapabilities(streaming=True, interim_results=True))

    async def _recognize_impl(self, *args: Any, **kwargs: Any) -> stt.SpeechEvent:
        raise NotImplementedError

    def stream(self, **kwargs: Any) -> stt.RecognizeStream:
        raise ConnectionError("the STT refused a second stream")


def test_a_listening_stream_that_cannot_open_costs_the_evidence_only_and_is_logged_once() -> None:
    async def run() -> None:
        words = CallerWords()
        with capture_logs() as logs:
            words.listen(_BrokenSTT())
            words.listen(_BrokenSTT())
        assert not words.listening
        assert [r["event"] for r in logs] == ["caller_words_unavailable"]
        assert logs[0]["why"] == "stream_not_opened"
        await words.aclose()

    asyncio.run(run())


def test_the_listening_stream_opens_only_for_a_hold_that_may_extend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened: list[float] = []
    listen = CallerWords.listen

    def spy(self: CallerWords, recognizer: stt.STT[Any]) -> None:
        opened.append(asyncio.get_running_loop().time())
        listen(self, recognizer)

    monkeypatch.setattr(CallerWords, "listen", spy)
    # held from 4.0 s: the stream opens LISTEN_AHEAD_S (2 s) before the 3 s bound
    world, _ = run_scenario(LONG_TALKER, ResilientAgent)
    assert [at - world.t0 for at in opened] == [pytest.approx(4.0 + 3.0 - 2.0, abs=0.11)]
    opened.clear()
    # a wait that cannot extend never listens
    run_scenario(LONG_TALKER, AT_THREE_SECONDS)
    assert opened == []
    # a hold that ends sooner (1.95 s of a 5 s wait) opens no stream
    run_scenario(catalog("tool_gap/gap_protected_say"), waiting(wait_s=5.0))
    assert opened == []


def test_a_hold_through_a_handoff_listens_through_the_sessions_one_observer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chains: list[list[str]] = []
    listen = CallerWords.listen

    def spy(self: CallerWords, recognizer: Any) -> None:
        listen(self, recognizer)
        session = self._observed.session if self._observed is not None else None
        labels, audio = [], session.input.audio if session is not None else None
        while audio is not None:
            labels.append(type(audio).__name__)
            audio = audio.source
        chains.append(labels)

    monkeypatch.setattr(CallerWords, "listen", spy)
    _, outcome = run_scenario(
        catalog("talk_over/caller_keeps_talking_through_handoff_hold"), ResilientAgent
    )
    assert outcome.passed, outcome.reasons
    # the hold listened for the caller's words, through the session's audio observation only:
    # no middleware put a feed of its own into the session's audio input
    assert chains
    assert all(not any("Feed" in label for label in chain) for chain in chains)


def test_the_caller_audio_reaches_the_listener_only_while_it_listens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shown: list[float] = []
    on_frame = CallerWords.on_frame

    def spy(self: CallerWords, frame: Any, now: float) -> None:
        shown.append(now)
        on_frame(self, frame, now)

    monkeypatch.setattr(CallerWords, "on_frame", spy)
    world, outcome = run_scenario(LONG_TALKER, ResilientAgent)
    released = events(outcome)[-1]["at_s"]
    assert released == pytest.approx(9.55, abs=0.01)
    # registered when the stream opened (5.0 s), unregistered at the release
    assert min(shown) - world.t0 == pytest.approx(5.0, abs=0.11)
    assert max(shown) - world.t0 <= released + 0.02
