"""Refuse answers that would render a broken project, before anything is written."""

from __future__ import annotations

import json
import re
import sys

# cookiecutter renders this file first; JSON keeps any quote or backslash in an answer intact
ANSWERS: dict[str, str] = json.loads(r"""{{ cookiecutter | tojson }}""")

# the slug names the folder and the distribution (PEP 508); LiveKit dispatches jobs by agent name
RULES = {
    "project_slug": (r"[a-z0-9]([a-z0-9._-]*[a-z0-9])?", "lowercase letters, digits and . _ -"),
    "agent_name": (r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", "letters, digits and . _ -"),
}


def problems() -> list[str]:
    """What is wrong with the answers, one line each."""
    found = [
        f"{key}={ANSWERS[key]!r}: use only {allowed}"
        for key, (pattern, allowed) in RULES.items()
        if not re.fullmatch(pattern, ANSWERS[key])
    ]
    # both are written into Python and TOML string literals
    found += [
        f"{key}={ANSWERS[key]!r}: must not contain double quotes or backslashes"
        for key in ("project_name", "description")
        if '"' in ANSWERS[key] or "\\" in ANSWERS[key]
    ]
    if not ANSWERS["project_name"].strip():
        found.append("project_name must not be empty")
    return found


if __name__ == "__main__":
    if errors := problems():
        print("error: " + "\n       ".join(errors), file=sys.stderr)
        sys.exit(1)
