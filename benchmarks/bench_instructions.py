"""ResilientAgent's CPU overhead in instructions per turn, and which middleware it goes to.

Wall-clock CPU on a shared machine moves by several percent from one run to the next (see
``bench_session``'s per-run ratios), too much to tell a change of one point. The instructions a
thread executes do not move: each figure here is the main thread's instruction count (valgrind's
callgrind, one count per thread) for the bench's N-turn call minus that of its 2-turn call, so
the session's start and end cancel out, divided by N - 2: instructions per turn. Only the call
itself is counted, from the moment ``run_scenario`` is called to the moment it returns (callgrind
dumps its counts at a marker on either side, :data:`CALL_MARKER`): the interpreter's start-up
(imports) and exit come to thousands of millions of instructions that do not cancel out between
two processes, since the heap layout moves them by millions.
An instruction of a numpy loop counts as much as one of a Python attribute lookup, and Agent's
own work has more of the former, so this ratio runs below the wall-clock one: it says where the
overhead is, not what it costs in seconds.

Variants: ``Agent``; ``ResilientAgent`` (the default middleware); ``ResilientAgent`` with
``middleware=[]`` (the interception layer alone); ``ResilientAgent`` with its OpenTelemetry hook
(:class:`~resilient_agent._session.tracing.RaceTelemetry`, the call report on the session span)
replaced by no-ops, to show what the hook costs with tracing off; with ``--by-middleware``, the
default set minus each first-party middleware in turn (what that middleware costs in the set). With
``--traced`` every variant runs with livekit's tracer on (an SDK provider and an in-memory
exporter, as ``resilient-agent lab --traces`` sets it up): what the chain costs in a traced
deployment.

At RoomIO's 50 ms frames on the lab's scripted session, ResilientAgent's instructions per turn
are held to a budget relative to Agent's, :data:`MAX_RATIO`: the run prints whether it holds and
exits 1 when it does not. With ``--production`` the call is the
production-shaped one of ``bench_session --production`` (real speech, livekit's embedded VAD and
turn detector, 50 ms frames; the models run in threads of their own, whose instructions are not
counted here, so the ratio is the main thread's).

Needs valgrind (``apt-get install valgrind``). Run ``python -m benchmarks.bench_instructions``
(``--frame-ms 50`` for RoomIO's default caller frames, ``--turns N``, ``--by-middleware``,
``--production``, ``--jobs N`` for N valgrind runs at a time, ``--pair`` for Agent and
ResilientAgent alone); one variant takes a few minutes under valgrind. Each variant is counted
from :data:`DEFAULT_LAYOUTS` heap layouts (``--layouts N``; see :func:`layout_environment`) and
its figure is their median, each layout's printed: one layout's count moves with where objects
happen to land, by more than most changes to the chain. ``--keep-profile DIR`` keeps the first
layout's main-thread callgrind file of each run's call in DIR (``<variant>-<turns>.callgrind``),
for ``python -m benchmarks.callgrind_diff DIR`` (per-function instructions per turn,
ResilientAgent minus Agent) or ``callgrind_annotate``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .budget import budget_verdict

BASE_TURNS = 2
# ResilientAgent's instructions per turn of the lab's scripted session at 50 ms frames, at most
# this many times Agent's (main thread, the call alone, the median of DEFAULT_LAYOUTS heap
# layouts): 3% for the chain. It printed 1.0304 when this budget replaced one of 3.72 M added
# per turn (docs/overhead.md, "Counting the call alone").
MAX_RATIO = 1.03
# A checkout that changes no code (another path, another build) moves the heap layouts, and with
# them the ratio, by up to this much (docs/overhead.md): above the ceiling by less is not a
# regression to act on.
HEAP_LAYOUT_NOISE = 0.002
# layout_environment's variable, and how far each layout shifts the heap from the one before
LAYOUT_VARIABLE = "RESILIENT_AGENT_BENCH_LAYOUT"
LAYOUT_STEP_BYTES = 1000
# the figure is the median of this many layouts: one layout's count is off by up to ~0.3 M a turn
DEFAULT_LAYOUTS = 5
# (label, agent class, first-party middleware left out, "*" for none at all, or NO_TELEMETRY)
_Variant = tuple[str, str, str | None]
NO_TELEMETRY = "telemetry"
# The C function the counted child calls right before and right after its call, for callgrind to
# dump its counts there (--dump-before): the second part holds the call alone. Nothing else in the
# child asks for its parent's pid, and _count refuses a run with any other dump.
CALL_MARKER = "getppid"
# a main-thread callgrind file: callgrind.<pid>[.<part>]-01, part 1 before the first dump
_MAIN_THREAD_FILE = re.compile(r"callgrind\.\d+(?:\.(\d+))?-01")


def _variants(by_middleware: bool, pair: bool = False) -> list[_Variant]:
    variants: list[_Variant] = [
        ("Agent", "Agent", None),
        ("ResilientAgent", "ResilientAgent", None),
    ]
    if pair:
        return variants
    variants += [
        ("  interception layer alone (middleware=[])", "ResilientAgent", "*"),
        ("  without the OpenTelemetry hook", "ResilientAgent", NO_TELEMETRY),
    ]
    if by_middleware:
        from resilient_agent.middleware import default_middleware_specs

        for spec in default_middleware_specs():
            name = spec.cls.__name__
            variants.append((f"  without {name}", "ResilientAgent", name))
    return variants


def _child(
    agent: str, turns: int, frame_s: float, without: str | None, traced: bool, production: bool
) -> None:
    """Run one bench call (under valgrind, started by :func:`_count`)."""
    import contextlib

    from livekit.agents import Agent
    from resilient_agent.middleware import default_middleware_specs

    from benchmarks.bench_session import _production_scenario, _scenario
    from resilient_agent import ResilientAgent
    from resilient_agent._session import runtime, tracing
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
    scenario = _production_scenario(turns) if production else _scenario(turns, frame_s=frame_s)
    with CallTraces() if traced else contextlib.nullcontext():
        os.getppid()  # CALL_MARKER: the counted call starts
        _, outcome = run_scenario(scenario, agent_class)
        os.getppid()  # CALL_MARKER: it is over
    if not outcome.passed:
        raise SystemExit(f"{agent} without {without} failed the {turns}-turn call")


def profile_name(label: str, turns: int) -> str:
    """The file name ``--keep-profile`` gives a variant's main-thread callgrind output."""
    words = re.findall(r"[A-Za-z0-9]+", label)
    return f"{'-'.join(words)}-{turns}.callgrind"


def _count(
    variant: _Variant,
    turns: int,
    frame_s: float,
    traced: bool,
    production: bool,
    keep: Path | None = None,
    layout: int = 0,
) -> int:
    """The main thread's instructions for one bench call of ``variant`` under callgrind.

    ``layout``: which heap layout the process starts from (see :func:`layout_environment`).
    With ``keep``, the main thread's callgrind file of the call is copied there (see
    :func:`profile_name`); only layout 0's is kept.

    Raises:
        RuntimeError: When callgrind did not dump at the child's two markers and nowhere else.
    """
    label, agent, without = variant
    with tempfile.TemporaryDirectory() as out:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--separate-threads=yes",
            f"--dump-before={CALL_MARKER}",
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
            "production" if production else "",
        ]
        if shutil.which("setarch"):
            # the same addresses every run: hash and allocation patterns repeat exactly
            command = ["setarch", "-R", *command]
        env = {**os.environ, "PYTHONHASHSEED": "0", **layout_environment(layout)}
        subprocess.run(command, check=True, capture_output=True, env=env)
        call = call_profile(Path(out), label)
        if keep is not None and layout == 0:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(call, keep / profile_name(label, turns))
        for line in call.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError(f"no instruction summary for {label}")


def call_profile(directory: Path, label: str) -> Path:
    """The callgrind file of ``directory`` that holds the main thread's counts for the call alone.

    Raises:
        RuntimeError: When callgrind did not dump the main thread's counts exactly twice (at the
            child's two :data:`CALL_MARKER` calls).
    """
    parts = {
        match.group(1): path
        for path in directory.iterdir()
        if (match := _MAIN_THREAD_FILE.fullmatch(path.name))
    }
    if parts.keys() != {"1", "2", None}:
        raise RuntimeError(
            f"{label}: callgrind dumped the main thread's counts {len(parts) - 1} times, not "
            f"twice at the {CALL_MARKER}() markers around the call"
        )
    return parts["2"]


def layout_environment(layout: int) -> dict[str, str]:
    """The environment that starts a counted process from heap layout number ``layout``.

    The same code counts differently from one heap layout to another: where objects land
    decides CPython's method-cache collisions and when glibc's realloc moves a block, and that
    moves the chain's figure by several hundred thousand instructions a turn (docs/overhead.md).
    A variable of ``layout`` kilobytes in the environment, copied into ``os.environ`` at start,
    shifts every object allocated after it; layout 0 adds nothing.
    """
    return {LAYOUT_VARIABLE: "x" * (LAYOUT_STEP_BYTES * layout)} if layout else {}


def _counted(
    variants: list[_Variant],
    turns: int,
    frame_s: float,
    traced: bool,
    production: bool,
    jobs: int,
    layouts: int,
    keep: Path | None = None,
) -> dict[str, float]:
    """Every variant's instructions per turn, the median over ``layouts`` heap layouts.

    ``jobs`` valgrind runs at a time: each counts its own process's instructions, so running
    several at once changes no count.
    """
    from concurrent.futures import ThreadPoolExecutor  # not in the counted child's imports

    calls = [
        (variant, n, layout)
        for layout in range(layouts)
        for variant in variants
        for n in (turns, BASE_TURNS)
    ]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        counts = list(
            pool.map(
                lambda call: _count(call[0], call[1], frame_s, traced, production, keep, call[2]),
                calls,
            )
        )
    by_call = dict(zip([(v[0], n, layout) for v, n, layout in calls], counts, strict=True))
    figures = {}
    for label, _, _ in variants:
        each = [
            (by_call[(label, turns, layout)] - by_call[(label, BASE_TURNS, layout)])
            / (turns - BASE_TURNS)
            for layout in range(layouts)
        ]
        if layouts > 1:
            print(f"  {label}, layout by layout: {', '.join(f'{c / 1e6:.2f}' for c in each)} M")
        figures[label] = statistics.median(each)
    return figures


def run(
    turns: int,
    frame_ms: int,
    by_middleware: bool,
    traced: bool = False,
    production: bool = False,
    jobs: int = 1,
    pair: bool = False,
    keep: Path | None = None,
    layouts: int = DEFAULT_LAYOUTS,
) -> bool:
    """Print the instructions per turn of each variant, and each one's difference.

    Returns:
        False when the lab session's budget (50 ms frames, untraced) is exceeded.
    """
    frame_s = frame_ms / 1000
    session = "production-shaped session, " if production else ""
    over = f", median of {layouts} heap layouts" if layouts > 1 else ""
    print(
        f"[{session}{frame_ms} ms caller frames{', livekit tracing on' if traced else ''}] "
        f"main-thread instructions per turn ({turns}-turn call minus {BASE_TURNS}-turn call, "
        f"callgrind{over})"
    )
    figures: dict[str, float] = {}
    variants = _variants(by_middleware, pair)
    counted = _counted(variants, turns, frame_s, traced, production, jobs, layouts, keep)
    for variant in variants:
        label = variant[0]
        count = counted[label]
        figures[label] = count
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
    if production or traced or frame_ms != 50:
        return True
    ratio = figures["ResilientAgent"] / figures["Agent"]
    verdict = budget_verdict(
        ratio, MAX_RATIO, HEAP_LAYOUT_NOISE, f"a checkout's heap-layout noise ({HEAP_LAYOUT_NOISE})"
    )
    print(
        f"budget: ResilientAgent runs {ratio:.4f} times Agent's instructions per turn of the lab "
        f"session at 50 ms frames, at most {MAX_RATIO}: {verdict}"
    )
    return verdict != "EXCEEDED"


def main(argv: Sequence[str] | None = None) -> None:
    """Run what the command line asks for."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=12, help="turns of the long call (12)")
    parser.add_argument("--frame-ms", type=int, choices=(10, 50), default=10)
    parser.add_argument("--by-middleware", action="store_true")
    parser.add_argument("--traced", action="store_true", help="livekit's tracer on, in memory")
    parser.add_argument(
        "--production", action="store_true", help="the production-shaped call (50 ms frames)"
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="valgrind runs at a time (1); the counts do not change"
    )
    parser.add_argument(
        "--pair", action="store_true", help="Agent and ResilientAgent alone, no other variant"
    )
    parser.add_argument(
        "--layouts",
        type=int,
        default=DEFAULT_LAYOUTS,
        help=f"count each variant from this many heap layouts, the median ({DEFAULT_LAYOUTS})",
    )
    parser.add_argument(
        "--keep-profile",
        type=Path,
        metavar="DIR",
        help="keep each run's main-thread callgrind file in DIR",
    )
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        agent, turns, frame_s, without, traced, production = args.child
        _child(
            agent,
            int(turns),
            float(frame_s),
            without or None,
            traced == "traced",
            production == "production",
        )
        return
    if args.production:
        args.frame_ms = 50
    if args.turns <= BASE_TURNS:
        parser.error(f"--turns must be more than {BASE_TURNS}")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.layouts < 1:
        parser.error("--layouts must be at least 1")
    if args.pair and args.by_middleware:
        parser.error("--pair and --by-middleware exclude each other")
    if not run(
        args.turns,
        args.frame_ms,
        args.by_middleware,
        args.traced,
        args.production,
        args.jobs,
        args.pair,
        args.keep_profile,
        args.layouts,
    ):
        sys.exit(1)


if __name__ == "__main__":
    main()
