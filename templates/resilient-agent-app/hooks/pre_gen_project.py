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
    requirement = ANSWERS.get("resilient_agent_requirement", "").strip()
    if requirement and not re.match(r"resilient[-_.]agent\b", requirement, re.I):
        found.append(
            f"resilient_agent_requirement={requirement!r}: must be a requirement for "
            "resilient-agent (resilient-agent==0.1.0, resilient-agent @ git+https://...)"
        )
    if '"' in requirement or "\\" in requirement:
        found.append(
            f"resilient_agent_requirement={requirement!r}: must not contain double quotes or "
            "backslashes"
        )
    if not ANSWERS["project_name"].strip():
        found.append("project_name must not be empty")
    return found


if __name__ == "__main__":
    if errors := problems():
        print("error: " + "\n       ".join(errors), file=sys.stderr)
        sys.exit(1)
