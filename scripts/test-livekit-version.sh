#!/usr/bin/env bash
# Run the test suite against one livekit-agents version, in a venv of its own.
#
#   scripts/test-livekit-version.sh VERSION [pytest args...]
#
# VERSION is a release (1.8.0) or `newest`: the newest release inside the range pyproject.toml
# declares. Examples:
#   scripts/test-livekit-version.sh 1.8.0                  # the declared floor, pinned exactly
#   scripts/test-livekit-version.sh 1.9.0 -x -q            # the next minor, the day it ships
#   PYTHON=/root/.pyenv/versions/3.13.0/bin/python scripts/test-livekit-version.sh newest
#
# Environment:
#   PYTHON      the interpreter that makes the venv (default: python3)
#   VENV_DIR    where the venv goes (default: a temporary folder, removed afterwards)
#
# The project is installed from this working tree with its dev extras and the example plugin (the
# plugin tests load it by entry point); then livekit-agents is pinned to VERSION, whatever range
# the project declares (pip reports the conflict; that is the point). Exits with pytest's code.
set -euo pipefail
if [ $# -lt 1 ]; then
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
version="$1"
shift
cd "$(dirname "$0")/.."

python="${PYTHON:-python3}"
venv="${VENV_DIR:-}"
if [ -z "$venv" ]; then
    venv="$(mktemp -d)/venv"
    trap 'rm -rf "$(dirname "$venv")"' EXIT
fi

"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" --upgrade pip
# the newest livekit-agents the declared range allows
"${pip[@]}" --upgrade --upgrade-strategy only-if-needed -e '.[dev]'
"${pip[@]}" ./examples/resilient-agent-example-plugin
if [ "$version" != "newest" ]; then
    # a plain pin (not --no-deps) lets pip move livekit's own dependencies to match
    "${pip[@]}" "livekit-agents==$version"
fi
installed="$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("livekit-agents"))')"
if [ "$version" != "newest" ] && [ "$installed" != "$version" ]; then
    echo "livekit-agents $version did not install (got $installed)" >&2
    exit 2
fi
echo "== livekit-agents $installed on $("$venv/bin/python" -V)"
"$venv/bin/python" -m pytest "$@"
