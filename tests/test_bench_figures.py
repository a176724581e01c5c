"""The benchmarks' figures the README quotes are what the benchmarks print.

``bench_latency`` runs on virtual time, so its figures are the same on every run: the README's
block of its last lines, and the per-race figures its prose quotes, must be printed as written.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_latency_block() -> tuple[list[str], str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("`python -m benchmarks.bench_latency` runs") :]
    found = re.search(r"```\n(.*?)```", section, re.S)
    assert found is not None
    return found.group(1).strip().splitlines(), section[found.end() :]


def test_bench_latency_prints_the_readmes_figures_and_nothing_stray() -> None:
    # the command as the README gives it, in a process of its own: a log line of the library
    # or livekit would reach the terminal through logging's last-resort handler
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_latency"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # the table's header first: no log line before it
    assert lines[0].startswith("race "), lines[:3]
    assert done.stderr == ""
    block, prose = _readme_latency_block()
    for line in block:
        assert line in lines, f"the README quotes {line!r}; bench_latency printed {lines[-6:]}"
    per_race = {line.split()[0]: line.split() for line in lines if line.startswith("vad/")}
    quoted = re.search(r"answered ([\d.]+), ([\d.]+) and ([\d.]+) s after the last word", prose)
    assert quoted is not None
    for name, figure in zip(
        ("vad/stuck_plain_agent", "vad/dead_plain_agent", "vad/no_end_of_speech_plain_agent"),
        quoted.groups(),
        strict=True,
    ):
        assert per_race[name][2] == figure, (name, per_race[name])
    (fault,) = [line for line in lines if line.startswith("provider fault stall/llm_hangs")]
    held = re.search(r"`stall/llm_hangs`.*?: ([\d.]+) s,", prose, re.S)
    assert held is not None and f": {held.group(1)}s " in fault, fault
