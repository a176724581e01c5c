"""Race recovery latency over the whole catalog and its sweeps, against each race's floor.

Every race scenario of the catalog (and every onset of its ``--sweep`` window) runs on
``ResilientAgent``. For each caller utterance (or typed message) it answers, the benchmark takes:

* the reply latency: from the caller's last word to the first audio of the answer;
* the floor: the no-race reply latency (``control/two_turns`` on the same agent, 1.2 s in the lab)
  counted from the later of the caller's last word and the end of any protected speech that
  still had to play after it (speech the caller must hear whole, which no policy can shorten
  without dropping it: protected when its audio began, created before the answer began);
* the excess over the floor, and the ratio of the reply to the no-race reply, both counted from
  that later moment.

Utterances answered by the result of a tool they asked for themselves (a booking) are left out:
their latency is the tool's work, not a race. Run ``python -m benchmarks.bench_latency``
(``--quick`` skips the sweeps); it prints each race's figures, then the median / p90 / max excess
and ratio, and the slowest answer to a faulty VAD.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

from resilient_agent import ResilientAgent
from resilient_agent.lab.catalog import scenarios
from resilient_agent.lab.run import quiet_logs
from resilient_agent.testing import CallWorld, Scenario, run_scenario
from resilient_agent.testing.clock import SAME_INSTANT_S
from resilient_agent.testing.scenario import CallerInput

__all__ = ["RaceReply", "main", "measure"]

# Provider faults, not races: an LLM that accepts a request and never answers cannot be told from
# a slow one before the watchdog's thinking_s (6 s), so its answer is bounded by that timer; a
# realtime model that never replies, likewise by RealtimeReplyWatch's no_reply_s (5 s).
# Reported on their own line.
PROVIDER_FAULTS = ("stall/llm_hangs", "realtime/openai/reply_never_comes")


@dataclass(frozen=True)
class RaceReply:
    """One answer to a caller in a race scenario.

    Attributes:
        scenario: Scenario name, with ``@onset`` for a sweep variant.
        utterance: Index among the scenario's caller inputs.
        latency_s: From the caller's last word to the first audio of the answer.
        protected_wait_s: How much protected speech still had to play after the last word.
        no_race_s: The no-race reply latency.
        vad_fault: Whether the scenario's VAD is faulty for this utterance.
    """

    scenario: str
    utterance: int
    latency_s: float
    protected_wait_s: float
    no_race_s: float
    vad_fault: bool

    @property
    def from_floor_s(self) -> float:
        """The latency counted from the later of the last word and the protected speech's end."""
        return self.latency_s - self.protected_wait_s

    @property
    def excess_s(self) -> float:
        """Seconds over the floor."""
        return self.from_floor_s - self.no_race_s

    @property
    def ratio(self) -> float:
        """The reply against the no-race reply, both from the floor's start."""
        return self.from_floor_s / self.no_race_s


def _protected_wait(world: CallWorld, said: CallerInput, latency: float) -> float:
    """Seconds of protected speech that still had to play after ``said`` ended.

    Speech protected when its audio began (or resumed), whose audio began before the answer's and
    went on after the caller's last word: the caller must hear it whole before the answer.
    """
    rec = world.recorder
    answer_at = said.end + latency
    protected = {
        p.speech_id
        for p in (*rec.playouts, *rec.resumes)
        if p.allow_interruptions is False and p.at < answer_at - SAME_INSTANT_S
    }
    last_end = said.end
    for speech_id in protected:
        if speech_id is not None:
            last_end = max(last_end, min(answer_at, _playout_end(world, speech_id)))
    return last_end - said.end


def _playout_end(world: CallWorld, speech_id: str) -> float:
    """When the speech's audio stopped playing (its last segment's end; -inf if it had none)."""
    starts = {p.at for p in world.recorder.playouts if p.speech_id == speech_id}
    ends = [
        s.ended_at
        for s in world.audio_out.segments
        if s.started_at in starts and s.ended_at is not None
    ]
    return max(ends, default=float("-inf"))


def _answered_by_own_tool(scenario: Scenario, said: CallerInput) -> bool:
    return any(
        rule.tool_calls
        and rule.when_user_says is not None
        and rule.when_user_says.lower() in said.text.lower()
        and said.expect_reply
        for rule in scenario.llm
    )


def _variants(sweep: bool) -> list[tuple[str, Scenario]]:
    found = []
    for scenario in scenarios():
        if scenario.control:
            continue
        found.append((scenario.name, scenario))
        if sweep and scenario.sweep is not None:
            window = scenario.sweep
            for onset in window.onsets():
                try:
                    variant = scenario.with_onset(window.utterance, onset)
                except ValueError:
                    continue
                found.append((f"{scenario.name}@{onset:.1f}", variant))
    return found


def no_race_latency() -> float:
    """The reply latency of ``control/two_turns`` on ResilientAgent (both turns agree)."""
    control = next(s for s in scenarios() if s.name == "control/two_turns")
    _, outcome = run_scenario(control, ResilientAgent)
    values = [v for v in outcome.reply_latencies_s if v is not None]
    return statistics.median(values)


def measure(*, sweep: bool = True) -> list[RaceReply]:
    """Run every race (and sweep variant) on ResilientAgent and measure each answer."""
    no_race = no_race_latency()
    replies = []
    for name, scenario in _variants(sweep):
        world, outcome = run_scenario(scenario, ResilientAgent)
        answered = [said for said in scenario.caller_inputs if said.expect_reply]
        for index, (said, latency) in enumerate(
            zip(answered, outcome.reply_latencies_s, strict=True)
        ):
            if latency is None or _answered_by_own_tool(scenario, said):
                continue
            faulty = (
                scenario.vad_fault.mode != "healthy"
                and said in scenario.utterances
                and scenario.utterances.index(said) == scenario.vad_fault.utterance
            )
            replies.append(
                RaceReply(
                    name, index, latency, _protected_wait(world, said, latency), no_race, faulty
                )
            )
    return replies


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def report(replies: list[RaceReply], *, detail: bool) -> None:
    """Print each race's answers, then the summary."""
    if detail:
        print(f"{'race':58} {'#':>2} {'reply':>6} {'prot.':>6} {'floor':>6} {'excess':>7} {'x':>5}")
        for r in replies:
            floor = r.protected_wait_s + r.no_race_s
            print(
                f"{r.scenario:58} {r.utterance:>2} {r.latency_s:6.2f} {r.protected_wait_s:6.2f} "
                f"{floor:6.2f} {r.excess_s:+7.2f} {r.ratio:5.2f}"
            )
    faults = [r for r in replies if r.scenario.split("@")[0] in PROVIDER_FAULTS]
    replies = [r for r in replies if r not in faults]
    excess = [r.excess_s for r in replies]
    ratios = [r.ratio for r in replies]
    no_race = replies[0].no_race_s if replies else float("nan")
    print(f"\n{len(replies)} race replies, no-race reply {no_race:.2f}s")
    print(
        f"excess over floor: median {statistics.median(excess):+.2f}s, "
        f"p90 {_p90(excess):+.2f}s, max {max(excess):+.2f}s"
    )
    print(
        f"ratio to the no-race reply: median {statistics.median(ratios):.2f}x, "
        f"p90 {_p90(ratios):.2f}x, max {max(ratios):.2f}x"
    )
    faulty = [r for r in replies if r.vad_fault]
    if faulty:
        slowest = max(faulty, key=lambda r: r.from_floor_s)
        print(
            f"faulty VAD ({len(faulty)} answers): slowest {slowest.from_floor_s:.2f}s after the "
            f"later of the last word and the protected speech ({slowest.scenario}); "
            f"from the last word: max {max(r.latency_s for r in faulty):.2f}s"
        )
    for r in faults:
        print(f"provider fault {r.scenario}: {r.latency_s:.2f}s ({r.ratio:.2f}x), not a race")


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the sweep variants")
    parser.add_argument("--summary", action="store_true", help="print only the summary")
    args = parser.parse_args()
    # livekit and the middleware log the races they run into: the benchmark prints its own lines
    with quiet_logs():
        replies = measure(sweep=not args.quick)
    report(replies, detail=not args.summary)


if __name__ == "__main__":
    main()
