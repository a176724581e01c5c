"""Python bytecodes ResilientAgent adds per turn, and the functions they run in.

A deterministic count without valgrind: ``sys.settrace`` with opcode events over the lab's call
of ``bench_instructions`` (RoomIO's 50 ms caller frames unless told), the N-turn call minus the
2-turn call, per turn, after an untraced 2-turn call of each agent (imports and caches warmed
alike). It counts interpreted bytecodes only: no C work (numpy, the event loop's selector,
object allocation), so it says where the chain's Python runs, not what it costs in instructions
(``bench_instructions`` counts those). The same code gives the same count on every run.

Run ``python -m benchmarks.bench_bytecodes`` (``--turns N``, ``--frame-ms 10``, ``--top K`` for
the K functions that add the most). ``--under NAME`` (repeatable) counts, in ResilientAgent's
calls only, what runs inside each function named ``NAME`` (``name`` or ``name@path-part``, e.g.
``_look@watchdog``), itself and everything it calls, per turn, and the K functions of it that run
the most: where one of the chain's entry points (a listener, a notify task, a timer) spends.
``--per-call`` counts instead what a call costs apart from its turns (its set-up and tear-down:
the 2-turn count minus two turns at the per-turn rate) for each agent, and the functions where
ResilientAgent's adds the most: a cost every call pays once, whatever its length.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Sequence
from types import FrameType
from typing import Any

BASE_TURNS = 2
_Key = tuple[str, int, str]


def _count(
    agent_class: type[Any], turns: int, frame_s: float, under: Sequence[str] = ()
) -> Counter[_Key]:
    from benchmarks.bench_session import _scenario
    from resilient_agent.testing import run_scenario

    counts: Counter[_Key] = Counter()
    roots = [_Root(name) for name in under]

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        code = frame.f_code
        key: _Key = (code.co_filename, code.co_firstlineno, code.co_name)
        if roots:
            root = _root_above(frame, roots)
            if root is None:
                return None
            key = (root, code.co_firstlineno, f"{code.co_name}\0{code.co_filename}")
        frame.f_trace_opcodes = True

        def local(frame: FrameType, event: str, arg: object) -> Any:
            if event == "opcode":
                counts[key] += 1
            return local

        return local

    scenario = _scenario(turns, frame_s=frame_s)
    sys.settrace(trace)
    try:
        _, outcome = run_scenario(scenario, agent_class)
    finally:
        sys.settrace(None)
    if not outcome.passed:
        raise SystemExit(f"{agent_class.__name__} failed the {turns}-turn call")
    return counts


class _Root:
    """A function whose inside ``--under`` counts: ``name``, or ``name@path-part``."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.name, _, self.path = spec.partition("@")

    def holds(self, frame: FrameType) -> bool:
        code = frame.f_code
        return code.co_name == self.name and self.path in code.co_filename


def _root_above(frame: FrameType | None, roots: Sequence[_Root]) -> str | None:
    """The innermost of ``roots`` that ``frame`` runs in (itself or a caller), if any."""
    while frame is not None:
        for root in roots:
            if root.holds(frame):
                return root.spec
        frame = frame.f_back
    return None


def extra_turns(
    agent_class: type[Any], turns: int, frame_s: float, under: Sequence[str] = ()
) -> Counter[_Key]:
    """Bytecodes of each function in the ``turns``-turn call beyond the 2-turn call.

    With ``under``, only those run inside one of these functions, keyed
    ``(function spec, first line, "name\\0path")``.
    """
    counts = _count(agent_class, turns, frame_s, under)
    counts.subtract(_count(agent_class, BASE_TURNS, frame_s, under))
    return counts


def _where(path: str) -> str:
    return path.split("site-packages/")[-1].removeprefix(os.getcwd() + os.sep)


def _print_under(under: Sequence[str], turns: int, frame_s: float, top: int) -> None:
    from resilient_agent import ResilientAgent

    counts = extra_turns(ResilientAgent, turns, frame_s, under)
    extra = turns - BASE_TURNS
    for spec in under:
        inside = Counter({k: v for k, v in counts.items() if k[0] == spec})
        print(f"inside {spec}: {round(sum(inside.values()) / extra):,} per turn; the {top} most:")
        for (_, line, name_path), count in inside.most_common(top):
            name, _, path = name_path.partition("\0")
            print(f"{round(count / extra):>8,}  {name}  {_where(path)}:{line}")


def per_call(agent_class: type[Any], turns: int, frame_s: float) -> Counter[_Key]:
    """Bytecodes of each function in a call apart from its turns (2-turn call minus 2 turns)."""
    short = _count(agent_class, BASE_TURNS, frame_s)
    long = _count(agent_class, turns, frame_s)
    extra = turns - BASE_TURNS
    # per function: the short call's count minus BASE_TURNS turns at the function's own rate
    return Counter(
        {
            key: round(short[key] - BASE_TURNS * (long[key] - short[key]) / extra)
            for key in short.keys() | long.keys()
        }
    )


def _print_per_call(turns: int, frame_s: float, top: int) -> None:
    from livekit.agents import Agent

    from resilient_agent import ResilientAgent

    print(
        f"[{round(frame_s * 1000)} ms caller frames] Python bytecodes per call apart from its "
        f"turns ({BASE_TURNS}-turn call minus {BASE_TURNS} turns at the {turns}-turn rate)"
    )
    _print_added(per_call(Agent, turns, frame_s), per_call(ResilientAgent, turns, frame_s), top)


def _print_added(
    agent: Counter[_Key], resilient: Counter[_Key], top: int, divisor: int = 1
) -> None:
    """Each agent's total and the ``top`` functions ResilientAgent adds the most in, / divisor."""
    total_agent = round(sum(agent.values()) / divisor)
    total_resilient = round(sum(resilient.values()) / divisor)
    print(f"Agent           {total_agent:>10,}")
    print(f"ResilientAgent  {total_resilient:>10,}  adds {total_resilient - total_agent:,}")
    added = resilient.copy()
    added.subtract(agent)
    print(f"the {top} functions that add the most:")
    for (path, line, name), count in added.most_common(top):
        print(f"{round(count / divisor):>8,}  {name}  {_where(path)}:{line}")


def main(argv: Sequence[str] | None = None) -> None:
    """Print the bytecodes per turn of both agents, and the functions that add the most."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=6, help="turns of the long call (6)")
    parser.add_argument("--frame-ms", type=int, choices=(10, 50), default=50)
    parser.add_argument("--top", type=int, default=15, help="functions listed (15)")
    parser.add_argument(
        "--under",
        action="append",
        default=[],
        metavar="NAME",
        help="count what runs inside this function (name or name@path-part), ResilientAgent only",
    )
    parser.add_argument(
        "--per-call",
        action="store_true",
        help="what a call costs apart from its turns (set-up and tear-down), per agent",
    )
    args = parser.parse_args(argv)
    if args.turns <= BASE_TURNS:
        parser.error(f"--turns must be more than {BASE_TURNS}")
    from livekit.agents import Agent

    from benchmarks.bench_session import _scenario
    from resilient_agent import ResilientAgent
    from resilient_agent.testing import run_scenario

    frame_s = args.frame_ms / 1000
    for agent_class in (Agent, ResilientAgent):
        run_scenario(_scenario(BASE_TURNS, frame_s=frame_s), agent_class)
    if args.under:
        _print_under(args.under, args.turns, frame_s, args.top)
        return
    if args.per_call:
        _print_per_call(args.turns, frame_s, args.top)
        return
    agent = extra_turns(Agent, args.turns, frame_s)
    resilient = extra_turns(ResilientAgent, args.turns, frame_s)
    print(
        f"[{args.frame_ms} ms caller frames] Python bytecodes per turn "
        f"({args.turns}-turn call minus {BASE_TURNS}-turn call, sys.settrace)"
    )
    _print_added(agent, resilient, args.top, divisor=args.turns - BASE_TURNS)


if __name__ == "__main__":
    main()
