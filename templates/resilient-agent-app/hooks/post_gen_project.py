"""Point the app at its resilient-agent, then drop the caches testing the template in place leaves.

``resilient_agent_requirement`` says where pip and uv install resilient-agent from. Left empty,
it is the resilient-agent checkout this template was rendered from (``resilient-agent @
file:///...``), so the app installs with ``python -m pip install -e '.[dev]'`` on a machine whose
package index has no resilient-agent.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

# cookiecutter renders this file first; JSON keeps any quote or backslash in an answer intact
ANSWERS: dict[str, str] = json.loads(r"""{{ cookiecutter | tojson }}""")
REQUIREMENT = ANSWERS.get("resilient_agent_requirement", "")
TEMPLATE_DIR = ANSWERS.get("_repo_dir", "")
DEPENDENCY_LINE = '    "resilient-agent",\n'


def checkout() -> Path | None:
    """The resilient-agent checkout holding this template, None if it is not in one."""
    template = Path(TEMPLATE_DIR)
    if not template.is_absolute():
        # hooks run inside the new project; the shell's PWD is where cookiecutter was started
        template = Path(os.environ.get("PWD", os.getcwd())) / template
    root = template.resolve().parent.parent
    return root if (root / "resilient_agent" / "__init__.py").is_file() else None


def requirement() -> str | None:
    """The requirement to write into pyproject.toml, None to keep the bare name."""
    if REQUIREMENT.strip():
        return REQUIREMENT.strip()
    root = checkout()
    return None if root is None else f"resilient-agent @ {root.as_uri()}"


if __name__ == "__main__":
    chosen = requirement()
    if chosen is None:
        print(
            "note: resilient-agent will be installed from your package index; render with "
            "resilient_agent_requirement=... to install it from elsewhere",
            file=sys.stderr,
        )
    else:
        pyproject = Path("pyproject.toml")
        text = pyproject.read_text(encoding="utf-8")
        pyproject.write_text(text.replace(DEPENDENCY_LINE, f'    "{chosen}",\n', 1), "utf-8")
    for cache in [Path(".ruff_cache"), Path(".pytest_cache"), *Path().rglob("__pycache__")]:
        shutil.rmtree(cache, ignore_errors=True)
