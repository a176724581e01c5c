"""The chain's Python heap per production-shaped session, held to its budget in every CI run.

The resident-size figures of ``bench_session`` move by tens of KB from run to run, so nobody saw
the chain's memory grow past its target; the traced heap does not move, so the budget of
``python -m benchmarks.bench_heap`` is checked here.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_heap import ADDED_KB_BUDGET, NO_TAP, HeapFigures, _report, _room

ROOT = Path(__file__).resolve().parent.parent
# the versions the budget was set on: object sizes, and so the heap, differ on others
BUDGET_PYTHON = (3, 11)
BUDGET_LIVEKIT = "1.8.9"


@pytest.mark.skipif(
    sys.version_info[:2] != BUDGET_PYTHON
    or importlib.metadata.version("livekit-agents") != BUDGET_LIVEKIT,
    reason=f"the heap budget is set on CPython 3.11 with livekit-agents {BUDGET_LIVEKIT}",
)
def test_the_chain_holds_no_more_heap_per_session_than_its_budget() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_heap"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    tap = re.search(r"the tap holds ([\d.]+) KB, the rest of the chain ([\d.]+) KB", out)
    assert tap is not None, out
    # the caller's recent audio is kept (at least the 0.4 s pre-roll: eight 50 ms frames)
    assert float(tap[1]) > 8 * 1.6
    assert float(tap[2]) > 0
    assert out.strip().splitlines()[-1].endswith(": holds"), out


def _results(agent_kb: float, resilient_kb: float) -> dict[str, HeapFigures]:
    return {
        "Agent": HeapFigures(per_session=agent_kb * 1e3, rooms={"livekit": 5e3}),
        "ResilientAgent": HeapFigures(per_session=resilient_kb * 1e3, rooms={"livekit": 6e3}),
        NO_TAP: HeapFigures(per_session=(resilient_kb - 10) * 1e3, rooms={}),
    }


def test_a_chain_over_its_budget_is_reported_and_fails_the_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _report(_results(1000.0, 1000.0 + ADDED_KB_BUDGET), 10)
    assert capsys.readouterr().out.strip().endswith(": holds")
    assert not _report(_results(1000.0, 1000.0 + ADDED_KB_BUDGET + 5), 10)
    out = capsys.readouterr().out
    assert out.strip().endswith(": EXCEEDED")
    assert "+1.0 KB  livekit" in out
    assert "the tap holds 10.0 KB" in out


def test_the_heap_is_told_by_the_room_that_allocated_it() -> None:
    site = "/venv/lib/python3.11/site-packages"
    assert _room("/work/resilient_agent/_engine/chain.py").startswith("the engine")
    assert _room("/work/resilient_agent/middleware/turn_keeper/keeper.py").endswith("TurnKeeper")
    assert _room("/work/resilient_agent/middleware/watchdog.py").endswith("the others")
    assert _room("/work/resilient_agent/_livekit/shutdown.py") == "livekit interceptions"
    assert _room(f"{site}/livekit/agents/voice/agent_session.py") == "livekit"
    assert _room("/usr/lib/python3.11/asyncio/events.py").startswith("Python")
