"""Drop the caches that linting or testing the template in place leaves in its folder."""

from __future__ import annotations

import shutil
from pathlib import Path

if __name__ == "__main__":
    # cookiecutter runs this hook inside the generated project
    for cache in [Path(".ruff_cache"), Path(".pytest_cache"), *Path().rglob("__pycache__")]:
        shutil.rmtree(cache, ignore_errors=True)
