"""Packaging: resilient_agent.middleware is the top-level middleware/ folder, on a plain path."""

from __future__ import annotations

import importlib
import re
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


def test_every_package_of_the_tree_is_packaged() -> None:
    # `pip install .` (not editable) ships only the packages pyproject lists: a new subpackage
    # left out installs a lab that cannot import itself
    # the [tool.setuptools] packages list (no tomllib on Python 3.10)
    block = re.search(r"^packages = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.S | re.M)
    assert block is not None
    listed = set(re.findall(r'"([\w.]+)"', block.group(1)))
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in _package_inits(ROOT / "resilient_agent")
    }
    assert listed == found


def _package_inits(folder: Path) -> list[Path]:
    # the middleware folder is linked in: walk through the link as the packaging does
    inits = [folder / "__init__.py"] if (folder / "__init__.py").exists() else []
    for child in sorted(folder.iterdir()):
        if child.is_dir() and child.name != "__pycache__":
            inits.extend(_package_inits(child))
    return inits
