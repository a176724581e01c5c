#!/usr/bin/env bash
# Run livekit/agents' own offline tests twice: as they are, then with Agent swapped for ResilientAgent.
#
#   scripts/livekit-suite-swapped.sh CHECKOUT [tests/MODULE.py...] [--option=value...]
#
# CHECKOUT is a livekit/agents checkout (its tests/ and pyproject.toml); nothing of it is copied
# here. Each test module runs as `python -m pytest --unit MODULE` from CHECKOUT (its offline
# category, on its fake VAD/STT/LLM/TTS) against the livekit-agents PYTHON has installed, one
# process per module (a module still running after MODULE_TIMEOUT seconds is reported as timed
# out). The modules are those the swap can change: the ones that name Agent, or import a helper
# module of tests/ that does (fake_session.py); modules given replace them, options go to every
# run. The second run first loads a small pytest plugin that replaces livekit.agents.Agent and
# livekit.agents.voice.Agent with resilient_agent.ResilientAgent (from this working tree), so
# every test module imported afterwards builds its agents on ResilientAgent; livekit's own
# classes keep the real Agent. Prints each run's counts and every test whose outcome differs;
# exits 1 when one does.
#
# Environment:
#   PYTHON          the interpreter with livekit-agents and resilient-agent's dependencies
#                   (default: python3)
#   WORK_DIR        where the plugin, the reports and a missing test plugin go (default: a
#                   temporary folder, removed afterwards)
#   MODULE_TIMEOUT  seconds one module may take (default: 300)
#
# The checkout's tests need pytest-asyncio-concurrent (one of its dev dependencies); when PYTHON
# lacks it, the version the checkout's pyproject.toml pins is installed into WORK_DIR, not into
# PYTHON's environment. Tracebacks are native (--tb=native): pytest's own rendering of some of
# them trips CPython 3.11's AST recursion check and stops the whole run.
set -euo pipefail
if [ $# -lt 1 ]; then
    sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
checkout="$(cd "$1" && pwd)"
shift
here="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
work="${WORK_DIR:-}"
if [ -z "$work" ]; then
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
fi
if [ ! -d "$checkout/tests" ] || [ ! -f "$checkout/pyproject.toml" ]; then
    echo "$checkout is not a livekit/agents checkout (no tests/ or pyproject.toml)" >&2
    exit 2
fi
mkdir -p "$work/plugin" "$work/site" "$work/lib"
# this working tree's resilient_agent alone (its tests/ must not shadow the checkout's tests/)
ln -sfn "$here/resilient_agent" "$work/lib/resilient_agent"

if ! "$python" -c 'import pytest_asyncio_concurrent' 2>/dev/null; then
    pin="$(grep -o 'pytest-asyncio-concurrent[=<>!~]*[0-9.]*' "$checkout/pyproject.toml" | head -1)"
    "$python" -m pip install --quiet --disable-pip-version-check --no-deps --target "$work/site" \
        "${pin:-pytest-asyncio-concurrent}"
fi

cat > "$work/plugin/resilient_agent_swap.py" <<'PLUGIN'
"""Loaded with -p before any test module: livekit.agents.Agent is ResilientAgent from here on."""

import livekit.agents
import livekit.agents.voice

import resilient_agent
from resilient_agent import ResilientAgent

_AGENT = livekit.agents.Agent
# ResilientAgent subclasses the real Agent (bound when resilient_agent was imported above)
assert _AGENT is not ResilientAgent and issubclass(ResilientAgent, _AGENT)
livekit.agents.Agent = ResilientAgent
livekit.agents.voice.Agent = ResilientAgent


def pytest_report_header(config):
    return f"livekit.agents.Agent is ResilientAgent, from {resilient_agent.__file__}"
PLUGIN

# one pytest process per module, so that a module that hangs on this livekit-agents (or stops
# pytest) costs that module only: it is reported as timed out after MODULE_TIMEOUT seconds
run() {
    local name="$1"
    shift
    mkdir -p "$work/$name"
    : > "$work/$name/timed-out"
    for module in "${modules[@]}"; do
        local report
        report="$work/$name/$(echo "$module" | tr '/' '_').xml"
        local code=0
        (
            cd "$checkout"
            PYTHONPATH="$work/plugin:$work/site:$work/lib${PYTHONPATH:+:$PYTHONPATH}" \
                timeout "${MODULE_TIMEOUT:-300}" "$python" -m pytest -q -p no:cacheprovider --unit \
                --continue-on-collection-errors --tb=native --junitxml="$report" \
                "$@" "${options[@]}" "$module"
        ) > "$work/$name/$(echo "$module" | tr '/' '_').log" 2>&1 || code=$?
        if [ "$code" -eq 124 ]; then
            echo "$module" >> "$work/$name/timed-out"
            rm -f "$report"
        fi
    done
}

modules=()
options=()
for arg in "$@"; do
    case "$arg" in
        -*) options+=("$arg") ;;
        *) modules+=("$arg") ;;
    esac
done
if [ ${#modules[@]} -eq 0 ]; then
    # the test modules that name Agent, directly or through a helper module of tests/
    mapfile -t modules < <(cd "$checkout" && "$python" - <<'SELECT'
import re
from pathlib import Path

agent = re.compile(r"\bAgent\b")
sources = {p.stem: p.read_text(encoding="utf-8") for p in Path("tests").glob("*.py")}
helpers = [m for m, text in sources.items() if not m.startswith("test_") and agent.search(text)]
helper = re.compile(r"\b(" + "|".join(map(re.escape, helpers)) + r")\b") if helpers else None
for module, text in sorted(sources.items()):
    if module.startswith("test_") and (agent.search(text) or (helper and helper.search(text))):
        print(f"tests/{module}.py")
SELECT
    )
fi

echo "over ${#modules[@]} modules: ${modules[*]}"
run plain
run swapped -p resilient_agent_swap

"$python" - "$work/plain" "$work/swapped" <<'COMPARE'
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def outcomes(folder):
    found = {}
    for module in (Path(folder) / "timed-out").read_text().split():
        found[f"{module} (whole module)"] = "timed out"
    cases = [c for report in sorted(Path(folder).glob("*.xml")) for c in ET.parse(report).iter("testcase")]
    for case in cases:
        kinds = [child for child in case if child.tag in ("failure", "error", "skipped")]
        outcome = "passed"
        if kinds:
            first = kinds[0]
            outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[first.tag]
            if first.tag == "skipped" and first.get("type") == "pytest.xfail":
                outcome = "xfailed"
        found[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return found


plain, swapped = outcomes(sys.argv[1]), outcomes(sys.argv[2])
for name, run in (("plain", plain), ("swapped", swapped)):
    counts = Counter(run.values())
    print(f"{name}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
differ = sorted(t for t in plain.keys() | swapped.keys() if plain.get(t) != swapped.get(t))
print(f"{len(differ)} differ")
for test in differ:
    print(f"  {test}: {plain.get(test, 'not run')} -> {swapped.get(test, 'not run')}")
sys.exit(1 if differ else 0)
COMPARE
