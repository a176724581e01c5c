"""ResilientAgent against a plain Agent: CPU of a 100-turn call, turn latencies, memory per session.

CPU: both agents run the same 100-turn call in the same process, alternating, five times each;
the figure is the median of the five per-pair ratios (ResilientAgent over Agent), after one
short untimed call of each (imports and caches warmed alike). End-of-turn to first-audio
latencies must be identical. The figure is measured with the lab's 10 ms caller frames, then
again with 50 ms frames, the frame duration livekit's RoomIO sends by default (the same audio in
five times fewer frames; the per-frame audio path costs five times less of the call).

Memory: each agent runs 100 concurrent 30 s lab sessions (a turn every 6 s) on one virtual-time
loop, in a fresh process of its own; every second from 8 s to 28 s into the calls the process's
resident memory over its size before the sessions started is sampled, and their mean divided by
100 is the memory per concurrent session (the lab's own recorders included, alike for both).
A third run turns the TurnKeeper's withheld-audio tap off, to show what the caller's audio kept
for the recoveries costs apart from the rest of the chain.

Run ``python -m benchmarks.bench_session`` (``--cpu-only`` / ``--memory-only`` for one half,
``--rounds N`` for N rounds of the CPU comparison on a busy machine).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import subprocess
import sys
import time
from typing import Any

import psutil  # type: ignore[import-untyped]  # installed with livekit-agents
from livekit.agents import Agent
from resilient_agent.middleware import default_middleware_specs
from resilient_agent.middleware.turn_keeper import TurnKeeper

from resilient_agent import MiddlewareSpec, ResilientAgent
from resilient_agent.lab import agents
from resilient_agent.testing import Scenario, Utterance, run_scenario, run_virtual
from resilient_agent.testing.audio import FRAME_SECONDS
from resilient_agent.testing.runner import run_scenario_async

TURNS = 100
TURN_SECONDS = 6.0
RUNS = 5
SESSIONS = 100
SESSION_SECONDS = 30.0
SAMPLE_FROM_S = 8.0
SAMPLE_TO_S = 28.0
# livekit's RoomIO default (RoomInputOptions.audio_frame_size_ms); the lab's own frames are 10 ms
ROOMIO_FRAME_S = 0.05
_CLASSES: dict[str, type[Agent]] = {"Agent": Agent, "ResilientAgent": ResilientAgent}
NO_TAP = "ResilientAgent without the audio tap"


class _NoTapAgent(ResilientAgent):
    """The default middleware with the TurnKeeper's withheld-audio tap off (memory half only).

    The tap keeps the caller's current sentence for the recoveries (withheld and dying-STT
    words); this variant shows what the rest of the chain holds per session.
    """

    def __init__(self, **kwargs: Any) -> None:
        specs = [
            MiddlewareSpec(TurnKeeper, recover_withheld_audio=False)
            if spec.cls is TurnKeeper
            else spec
            for spec in default_middleware_specs()
        ]
        super().__init__(middleware=specs, **kwargs)


_MEMORY_CLASSES: dict[str, type[Agent]] = {**_CLASSES, NO_TAP: _NoTapAgent}


def _scenario(
    turns: int = TURNS, duration: float | None = None, frame_s: float = FRAME_SECONDS
) -> Scenario:
    utterances = tuple(
        Utterance(1.0 + i * TURN_SECONDS, 2.5 + i * TURN_SECONDS, f"question number {i} please")
        for i in range(turns)
    )
    return Scenario(
        name=f"bench/{turns}_turns",
        family="bench",
        description=f"{turns} ordinary turns.",
        agent=agents.plain_agent,
        utterances=utterances,
        duration=duration if duration is not None else turns * TURN_SECONDS + 2.0,
        caller_frame_s=frame_s,
    )


def _run(agent_class: type[Agent], frame_s: float) -> tuple[float, list[float | None], bool]:
    scenario = _scenario(frame_s=frame_s)
    # the previous run's garbage is collected here, not inside this run's time (it was the
    # other class's, every other run)
    gc.collect()
    started = time.process_time()
    _, outcome = run_scenario(scenario, agent_class)
    return time.process_time() - started, outcome.reply_latencies_s, outcome.passed


def cpu(rounds: int = 1) -> None:
    """Print the CPU figures of ``rounds`` rounds and, for several, the median of their medians.

    First with the lab's 10 ms caller frames (the figure #17 asks for), then with RoomIO's
    default 50 ms frames. On a shared machine one round's median moves by several percent with
    the load; several rounds show how much.
    """
    for frame_s in (FRAME_SECONDS, ROOMIO_FRAME_S):
        # one short call of each first, so that neither class's first timed run pays for the
        # imports and caches of the process (the first pair's ratio used to carry them)
        for cls in _CLASSES.values():
            run_scenario(_scenario(turns=1, duration=4.0, frame_s=frame_s), cls)
        medians = [_cpu_round(frame_s) for _ in range(rounds)]
        if rounds > 1:
            print(
                f"[{_frames(frame_s)}] median ratios of {rounds} rounds: "
                f"{', '.join(f'{m:.3f}' for m in medians)}; "
                f"their median {statistics.median(medians):.3f}"
            )


def _frames(frame_s: float) -> str:
    source = "the lab's" if frame_s == FRAME_SECONDS else "RoomIO's default"
    return f"{frame_s * 1000:.0f} ms caller frames, {source}"


def _cpu_round(frame_s: float) -> float:
    """One round: print CPU seconds, the median per-pair ratio and whether latencies match."""
    seconds: dict[str, list[float]] = {"Agent": [], "ResilientAgent": []}
    latencies: dict[str, list[list[float | None]]] = {"Agent": [], "ResilientAgent": []}
    for _ in range(RUNS):
        for label, cls in _CLASSES.items():
            spent, per_turn, passed = _run(cls, frame_s)
            assert passed, f"{label} failed the 100-turn call"
            seconds[label].append(spent)
            latencies[label].append(per_turn)
    ratios = [r / a for a, r in zip(seconds["Agent"], seconds["ResilientAgent"], strict=True)]
    base, resilient = (
        statistics.median(seconds["Agent"]),
        statistics.median(seconds["ResilientAgent"]),
    )
    print(
        f"[{_frames(frame_s)}] {TURNS}-turn session CPU (median of {RUNS}): "
        f"Agent {base:.2f}s, ResilientAgent {resilient:.2f}s"
    )
    print(f"per-run ratios: {', '.join(f'{r:.3f}' for r in ratios)}")
    print(
        f"CPU ratio ResilientAgent/Agent (median of {RUNS} alternating runs): "
        f"{statistics.median(ratios):.3f}"
    )
    runs = latencies["Agent"] + latencies["ResilientAgent"]
    same = all(run == runs[0] for run in runs)
    values = [v for v in runs[0] if v is not None]
    print(
        f"end-of-turn to first audio: mean {sum(values) / len(values):.3f}s; "
        f"identical for all {TURNS} turns in all {len(runs)} runs: {same}"
    )
    return statistics.median(ratios)


def _rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


async def _concurrent_sessions(agent_class: type[Agent]) -> int:
    scenario = _scenario(turns=4, duration=SESSION_SECONDS)
    loop = asyncio.get_running_loop()
    start = loop.time()
    calls = [loop.create_task(run_scenario_async(scenario, agent_class)) for _ in range(SESSIONS)]
    samples = []
    at = SAMPLE_FROM_S
    while at <= SAMPLE_TO_S:
        await asyncio.sleep(at - (loop.time() - start))
        samples.append(_rss())
        at += 1.0
    await asyncio.gather(*calls)
    return int(statistics.mean(samples))


def memory_child(label: str) -> None:
    """In a fresh process: print the bytes per concurrent session for one agent class."""
    # one short call first, so both classes start from warmed-up imports and caches
    run_scenario(_scenario(turns=1, duration=4.0), _MEMORY_CLASSES[label])
    before = _rss()
    during = run_virtual(_concurrent_sessions(_MEMORY_CLASSES[label]))
    print((during - before) / SESSIONS)


def memory() -> None:
    """Print the memory per concurrent session of each agent, their ratio, and without the tap."""
    per_session: dict[str, float] = {}
    for label in _MEMORY_CLASSES:
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.bench_session", "--memory-child", label],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        per_session[label] = float(out.strip().splitlines()[-1])
    base, resilient = per_session["Agent"], per_session["ResilientAgent"]
    print(
        f"memory per concurrent session ({SESSIONS} sessions, mean of "
        f"{SAMPLE_FROM_S:.0f}-{SAMPLE_TO_S:.0f}s into the call): "
        f"Agent {base / 1e6:.3f} MB, ResilientAgent {resilient / 1e6:.3f} MB, "
        f"ratio {resilient / base:.3f}"
    )
    no_tap = per_session[NO_TAP]
    print(
        f"{NO_TAP} (recover_withheld_audio=False): {no_tap / 1e6:.3f} MB, "
        f"ratio {no_tap / base:.3f}; the tap holds {(resilient - no_tap) / 1e3:.1f} KB"
    )


def main() -> None:
    """Run what the command line asks for (both halves by default)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-only", action="store_true")
    parser.add_argument("--memory-only", action="store_true")
    parser.add_argument(
        "--rounds", type=int, default=1, help="CPU rounds of 5 alternating pairs (default 1)"
    )
    parser.add_argument("--memory-child", choices=sorted(_MEMORY_CLASSES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child)
        return
    if not args.memory_only:
        cpu(args.rounds)
    if not args.cpu_only:
        memory()


if __name__ == "__main__":
    main()
