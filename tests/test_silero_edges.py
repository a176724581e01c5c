"""A replay's Silero follows the report's turn end only within two Silero windows."""

from __future__ import annotations

from livekit.agents import vad

from resilient_agent.testing.silero_edges import SILERO_WINDOW_S, EdgeFollower

W = SILERO_WINDOW_S
SILENCE = 0.55  # the lab's min_silence_duration: Silero waits 18 windows (0.576 s)
END, DONE, START = (
    vad.VADEventType.END_OF_SPEECH,
    vad.VADEventType.INFERENCE_DONE,
    vad.VADEventType.START_OF_SPEECH,
)


def _window(p: float, *, speaking: bool, speech: float = 1.0) -> vad.VADEvent:
    return vad.VADEvent(DONE, 0, 0.0, speech, 0.0, probability=p, speaking=speaking)


def _silero_end(silence: float) -> vad.VADEvent:
    return vad.VADEvent(END, 0, 0.0, 1.0, silence)


def _turn_ending(follower: EdgeFollower, last_voiced: float) -> list[tuple[float, vad.VADEvent]]:
    """Silero hearing speech until ``last_voiced``, then silence until its own end: what is sent."""
    sent: list[tuple[float, vad.VADEvent]] = []
    now = last_voiced - 3 * W
    while now <= last_voiced + 1e-9:
        sent += [(now, e) for e in follower.on_event(_window(0.9, speaking=True), now)]
        now += W
    for _ in range(18):
        sent += [(now, e) for e in follower.on_event(_window(0.01, speaking=True), now)]
        now += W
    now -= W  # Silero ends the turn at its 18th silent window
    sent += [(now, e) for e in follower.on_event(_silero_end(18 * W), now)]
    for _ in range(3):
        now += W
        sent += [(now, e) for e in follower.on_event(_window(0.01, speaking=False, speech=0), now)]
    return sent


def _ends(sent: list[tuple[float, vad.VADEvent]]) -> list[float]:
    """The turn ends livekit dates from the sent ends (``time.time() - silence_duration``)."""
    return [round(at - e.silence_duration, 3) for at, e in sent if e.type == END]


def test_a_turn_the_replay_ends_one_window_late_ends_at_the_recorded_time() -> None:
    follower = EdgeFollower([9.664], SILENCE)
    sent = _turn_ending(follower, last_voiced=9.700)
    assert _ends(sent) == [9.664]
    # sent when the call's Silero sent it: 18 windows of silence after the recorded end
    (at,) = [at for at, e in sent if e.type == END]
    assert round(at - 9.664, 3) >= 18 * W - W / 2
    # past it livekit is told the caller is silent (a speaking window would interrupt the reply)
    after = [e for t, e in sent if t > at and e.type == DONE]
    assert after and not any(e.speaking or e.speech_duration for e in after)
    assert [(f.replayed, f.recorded) for f in follower.followed] == [(9.7, 9.664)]


def test_a_turn_end_three_windows_off_or_the_same_is_left_to_silero() -> None:
    for last_voiced in (9.664 + 3 * W, 9.664):
        follower = EdgeFollower([9.664], SILENCE)
        sent = _turn_ending(follower, last_voiced)
        assert _ends(sent) == [round(last_voiced, 3)]
        assert not follower.followed


def test_no_recorded_ends_no_change() -> None:
    follower = EdgeFollower([], SILENCE)
    sent = _turn_ending(follower, last_voiced=9.7)
    assert _ends(sent) == [9.7]


def test_a_turn_the_replay_ends_early_is_held_until_the_recorded_end() -> None:
    follower = EdgeFollower([9.664], SILENCE)
    now = 9.632 + 18 * W
    assert follower.on_event(_silero_end(18 * W), now) == []
    assert follower.due() == 9.664 + 18 * W
    # while held, livekit is told the caller speaks on, as Silero would before its end
    (told,) = follower.on_event(_window(0.01, speaking=False, speech=0), now + W / 2)
    assert told.speaking
    assert follower.release_due(now + W / 2) == []
    (released,) = follower.release_due(follower.due() or 0.0)
    assert round(9.664 + 18 * W - released.silence_duration, 3) == 9.664
    # and beyond two windows early it is Silero's own
    early = EdgeFollower([9.664], SILENCE)
    assert early.on_event(_silero_end(18 * W), 9.664 - 3 * W + 18 * W)
    assert early.due() is None


def test_speech_heard_again_after_a_followed_end_starts_a_turn() -> None:
    follower = EdgeFollower([9.664], SILENCE)
    now, sent = 9.6, []
    for p in [0.9] * 4 + [0.01] * 17:
        sent += follower.on_event(_window(p, speaking=True), now)
        now += W
    assert [e.type for e in sent].count(END) == 1
    # Silero heard the caller again before its own end: the replay does what it hears
    resumed = follower.on_event(_window(0.9, speaking=True), now)
    assert [e.type for e in resumed] == [DONE, START]
    # Silero's own end later is the replayed turn's
    assert follower.on_event(_silero_end(18 * W), now + W)
