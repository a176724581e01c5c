"""ResilientAgent's CPU overhead in instructions per turn, and which middleware it goes to.

Wall-clock CPU on a shared machine moves by several percent from one run to the next (see
``bench_session``'s per-run ratios), too much to tell a change of one point. The instructions a
thread executes do not move: each figure here is the main thread's instruction count (valgrind's
callgrind, one count per thread) for the bench's N-turn call minus that of its 2-turn call, so
imports, caches and session start-up cancel out, divided by N - 2: instructions per turn.
An instruction of a numpy loop counts as much as one of a Python attribute lookup, and Agent's
own work has more of the former, so this ratio runs below the wall-clock one: it says where the
overhead is, not what it costs in seconds.

Variants: ``Agent``; ``ResilientAgent`` (the default middleware); ``ResilientAgent`` with
``middleware=[]`` (the interception layer alone); ``ResilientAgent`` with its OpenTelemetry hook
(:class:`~resilient_agent.tracing.RaceTelemetry`, the call report on the session span) replaced
by no-ops, to show what the hook costs with tracing off; with ``--by-middleware``, the default
set minus each first-party middleware in turn (what that middleware costs in the set). With
``--traced`` every variant runs with livekit's tracer on (an SDK provider and an in-memory
exporter, as ``resilient-agent lab --traces`` sets it up): what the chain costs in a traced
deployment.

Needs valgrind (``apt-get install valgrind``). Run ``python -m benchmarks.bench_instructions``
(``--frame-ms 50`` for RoomIO's default caller frames, ``--turns N``, ``--by-middleware``); one
variant takes a few minutes under valgrind.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

BASE_TURNS = 2
# (label, agent class, first-party middleware left out, "*" for none at all, or NO_TELEMETRY)
_Variant = tuple[str, str, str | None]
NO_TELEMETRY = "telemetry"


def _variants(by_middleware: bool) -> list[_Variant]:
    variants: list[_Variant] = [
        ("Agent", "Agent", None),
        ("ResilientAgent", "ResilientAgent", None),
        ("  interception layer alone (middleware=[])", "ResilientAgent", "*"),
        ("  without the OpenTelemetry hook", "ResilientAgent", NO_TELEMETRY),
    ]
    if by_middleware:
        from resilient_agent.middleware import default_middleware_specs

        for spec in default_middleware_specs():
            name = spec.cls.__name__
            variants.append((f"  without {name}", "ResilientAgent", name))
    return variants


def _child(agent: str, turns: int, frame_s: float, without: str | None, traced: bool) -> None:
    """Run one bench call (under valgrind, started by :func:`_count`)."""
    import contextlib

    from livekit.agents import Agent
    from resilient_agent.middleware import default_middleware_specs

    from benchmarks.bench_session import _scenario
    from resilient_agent import ResilientAgent, runtime, tracing
    from resilient_agent.lab.traces import CallTraces
    from resilient_agent.testing import run_scenario

    agent_class: type[Agent] = Agent
    if agent == "ResilientAgent":
        agent_class = ResilientAgent
        if without == NO_TELEMETRY:
            # the hook as the runtime holds it: its one telemetry call per event and per close
            setattr(tracing.RaceTelemetry, "record", lambda self, event: None)  # noqa: B010
            setattr(runtime, "record_report", lambda report, session: None)  # noqa: B010
        elif without is not None:
            kept = [s for s in default_middleware_specs() if without not in ("*", s.cls.__name__)]

            class Variant(ResilientAgent):
                def __init__(self, **kwargs: object) -> None:
                    super().__init__(middleware=kept, **kwargs)  # type: ignore[arg-type]

            agent_class = Variant
    with CallTraces() if traced else contextlib.nullcontext():
        _, outcome = run_scenario(_scenario(turns=turns, frame_s=frame_s), agent_class)
    if not outcome.passed:
        raise SystemExit(f"{agent} without {without} failed the {turns}-turn call")


def _count(variant: _Variant, turns: int, frame_s: float, traced: bool) -> int:
    """The main thread's instructions for one bench call of ``variant`` under callgrind."""
    _, agent, without = variant
    with tempfile.TemporaryDirectory() as out:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--separate-threads=yes",
            f"--callgrind-out-file={out}/callgrind.%p",
            sys.executable,
            "-m",
            "benchmarks.bench_instructions",
            "--child",
            agent,
            str(turns),
            str(frame_s),
            without or "",
            "traced" if traced else "",
        ]
        if shutil.which("setarch"):
            # the same addresses every run: hash and allocation patterns repeat exactly
            command = ["setarch", "-R", *command]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(command, check=True, capture_output=True, env=env)
        # one file per thread: the main thread's ends in -01
        (main_thread,) = Path(out).glob("callgrind.*-01")
        for line in main_thread.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError(f"no instruction summary for {variant[0]}")


def per_turn(variant: _Variant, turns: int, frame_s: float, traced: bool = False) -> float:
    """Instructions per turn: the ``turns``-turn call minus the 2-turn call, per extra turn."""
    long_call = _count(variant, turns, frame_s, traced)
    return (long_call - _count(variant, BASE_TURNS, frame_s, traced)) / (turns - BASE_TURNS)


def run(turns: int, frame_ms: int, by_middleware: bool, traced: bool = False) -> None:
    """Print the instructions per turn of each variant, and each one's difference."""
    frame_s = frame_ms / 1000
    print(
        f"[{frame_ms} ms caller frames{', livekit tracing on' if traced else ''}] main-thread "
        f"instructions per turn ({turns}-turn call minus {BASE_TURNS}-turn call, callgrind)"
    )
    figures: dict[str, float] = {}
    for variant in _variants(by_middleware):
        label = variant[0]
        figures[label] = count = per_turn(variant, turns, frame_s, traced)
        if label == "Agent":
            print(f"{label:<46} {count / 1e6:9.2f} M", flush=True)
        elif label == "ResilientAgent":
            ratio = count / figures["Agent"]
            print(f"{label:<46} {count / 1e6:9.2f} M  ratio {ratio:.4f}", flush=True)
        elif variant[2] == "*":
            extra = count - figures["Agent"]
            print(f"{label:<46} {count / 1e6:9.2f} M  {extra / 1e6:+.2f} M over Agent", flush=True)
        elif variant[2] == NO_TELEMETRY:
            share = figures["ResilientAgent"] - count
            print(f"{label:<46} {count / 1e6:9.2f} M  the hook costs {share:+.0f}", flush=True)
        else:
            share = figures["ResilientAgent"] - count
            print(f"{label:<46} {count / 1e6:9.2f} M  it costs {share / 1e6:+.2f} M", flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    """Run what the command line asks for."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=12, help="turns of the long call (12)")
    parser.add_argument("--frame-ms", type=int, choices=(10, 50), default=10)
    parser.add_argument("--by-middleware", action="store_true")
    parser.add_argument("--traced", action="store_true", help="livekit's tracer on, in memory")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        agent, turns, frame_s, without, traced = args.child
        _child(agent, int(turns), float(frame_s), without or None, traced == "traced")
        return
    if args.turns <= BASE_TURNS:
        parser.error(f"--turns must be more than {BASE_TURNS}")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    run(args.turns, args.frame_ms, args.by_middleware, args.traced)


if __name__ == "__main__":
    main()
