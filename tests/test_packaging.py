"""Packaging: resilient_agent.middleware is the top-level middleware/ folder, on a plain path."""

from __future__ import annotations

import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_first_party_package_is_the_top_level_middleware_folder() -> None:
    link = ROOT / "resilient_agent" / "middleware"
    assert link.is_symlink() and link.resolve() == (ROOT / "middleware").resolve()
    module = importlib.import_module("resilient_agent.middleware")
    assert Path(module.__file__ or "").resolve().parent == (ROOT / "middleware").resolve()


def test_no_package_dir_mapping_needs_an_import_hook() -> None:
    # a mapping other than the root makes setuptools install an editable import-hook finder,
    # which mypy cannot follow (a third-party plugin then fails to type-check)
    section = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-dir]")[1]
    mapping = section.split("[", 1)[0]
    assert [line for line in mapping.splitlines() if "=" in line] == ['"" = "."']
