"""Where ResilientAgent's extra instructions go: per-function callgrind figures, per turn.

Reads the main-thread callgrind files ``python -m benchmarks.bench_instructions --keep-profile DIR``
kept (``Agent-N``, ``Agent-2``, ``ResilientAgent-N``, ``ResilientAgent-2``), takes each
function's instructions in the N-turn call minus the 2-turn call, per extra turn, as the bench
does for the totals, and lists the functions whose figure differs the most between the two
agents: by object file (the interpreter, numpy, ``_asyncio``, pydantic-core, libc), then by
function, exclusive (the function's own instructions) and inclusive (with what it calls; a
recursive call counted once). Python 3.11 runs Python code in ``_PyEval_EvalFrameDefault``, so
the names are the interpreter's C functions: allocation, the garbage collector, dict lookups,
task creation, numpy. Run ``python -m benchmarks.callgrind_diff DIR`` (``--top K``).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from .bench_instructions import BASE_TURNS, profile_name

_NAMED = re.compile(r"\((\d+)\)(?: (.*))?")


class Costs:
    """One callgrind file's instructions (``Ir``): by function, exclusive and inclusive, and by
    object file (exclusive)."""

    def __init__(self) -> None:
        self.exclusive: Counter[str] = Counter()
        self.inclusive: Counter[str] = Counter()
        self.by_object: Counter[str] = Counter()


def costs(path: Path) -> Costs:
    """Read one callgrind file (the format of ``--compress-strings``, callgrind's default)."""
    found = Costs()
    exclusive, inclusive, by_object = found.exclusive, found.inclusive, found.by_object
    names: dict[str, dict[str, str]] = {"fn": {}, "ob": {}}
    function = callee = obj = ""
    after_calls = False
    for line in path.read_text().splitlines():
        if not line:
            continue
        head = line[0]
        if head.isdigit() or head in "+-*":
            fields = line.split()
            if len(fields) < 2:
                after_calls = False
                continue
            cost = int(fields[-1])
            if after_calls:
                after_calls = False
                if callee != function:
                    inclusive[function] += cost
            else:
                exclusive[function] += cost
                inclusive[function] += cost
                by_object[obj] += cost
            continue
        key, _, value = line.partition("=")
        if key in ("ob", "cob"):
            name = _resolve(names["ob"], value)
            if key == "ob":
                obj = name.rsplit("/", 1)[-1]
        elif key in ("fn", "cfn"):
            name = _resolve(names["fn"], value)
            if key == "fn":
                function = name
            else:
                callee = name
        elif key == "calls":
            after_calls = True
    return found


def _resolve(known: dict[str, str], value: str) -> str:
    """A compressed name: ``(id) name`` defines it, ``(id)`` refers to it."""
    match = _NAMED.fullmatch(value)
    if match is None:
        return value
    ident, name = match.groups()
    if name is not None:
        known[ident] = name
    return known.get(ident, value)


def per_turn(directory: Path, label: str, turns: int) -> list[Counter[str]]:
    """A variant's instructions per turn, the long call minus the 2-turn call: by object file,
    by function exclusive, by function inclusive."""
    long = costs(directory / profile_name(label, turns))
    base = costs(directory / profile_name(label, BASE_TURNS))
    extra = turns - BASE_TURNS
    return [
        _per_extra(long.by_object, base.by_object, extra),
        _per_extra(long.exclusive, base.exclusive, extra),
        _per_extra(long.inclusive, base.inclusive, extra),
    ]


def _per_extra(long: Counter[str], base: Counter[str], extra: int) -> Counter[str]:
    return Counter({name: (long[name] - base[name]) / extra for name in long.keys() | base.keys()})


def _turns(directory: Path) -> int:
    found = {
        int(p.stem.rsplit("-", 1)[1]) for p in directory.glob("ResilientAgent-*.callgrind")
    } - {BASE_TURNS}
    if len(found) != 1:
        raise SystemExit(f"expected one long call's ResilientAgent file in {directory}")
    return found.pop()


def main(argv: Sequence[str] | None = None) -> None:
    """Print the functions whose instructions per turn differ the most between the agents."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="a --keep-profile directory")
    parser.add_argument("--top", type=int, default=40, help="functions listed per table (40)")
    args = parser.parse_args(argv)
    turns = _turns(args.directory)
    agent = per_turn(args.directory, "Agent", turns)
    resilient = per_turn(args.directory, "ResilientAgent", turns)
    tables = (("object file", 0), ("function, exclusive", 1), ("function, inclusive", 2))
    for title, index in tables:
        difference = Counter(
            {
                name: resilient[index][name] - agent[index][name]
                for name in agent[index].keys() | resilient[index].keys()
            }
        )
        if index == 0:
            total = sum(difference.values())
            print(f"instructions per turn: Agent {sum(agent[0].values()) / 1e6:.2f} M, ", end="")
            print(f"ResilientAgent {sum(resilient[0].values()) / 1e6:.2f} M")
            print(f"ResilientAgent minus Agent, instructions per turn: {total / 1e6:+.3f} M")
        print(f"\nby {title}: the {args.top} largest differences (per turn; Agent, ResilientAgent)")
        ranked = sorted(difference.items(), key=lambda item: -abs(item[1]))[: args.top]
        for name, diff in ranked:
            print(
                f"{diff / 1e3:+10.1f} k  {agent[index][name] / 1e3:10.1f} k "
                f"{resilient[index][name] / 1e3:10.1f} k  {name}"
            )


if __name__ == "__main__":
    main()
