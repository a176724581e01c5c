"""Fixtures shared by test modules."""

from __future__ import annotations

import gc
import importlib.metadata
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from lab_calls import LabCalls

from resilient_agent._engine.plugins import ENTRY_POINT_GROUP, clear_plugin_cache

EXAMPLE_PLUGIN = Path(__file__).resolve().parents[1] / "examples" / "resilient-agent-example-plugin"


def _declared(pyproject: str, key: str) -> str:
    """A ``key = "value"`` line of the example plugin's pyproject.toml (3.10 has no tomllib)."""
    found = re.search(rf'^{re.escape(key)} = "([^"]+)"$', pyproject, re.M)
    assert found is not None, f"examples/.../pyproject.toml declares no {key}"
    return found.group(1)


@pytest.fixture
def example_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[importlib.metadata.Distribution]:
    """The example plugin's distribution, discoverable by its entry point.

    Installed (``pip install ./examples/resilient-agent-example-plugin``) it is found as it is;
    otherwise its sources and the entry point its pyproject.toml declares go on a throwaway
    site, as pip would write them, so the README's test command needs nothing more.
    """
    clear_plugin_cache()
    try:
        found = importlib.metadata.distribution("resilient-agent-example-plugin")
    except importlib.metadata.PackageNotFoundError:
        pyproject = (EXAMPLE_PLUGIN / "pyproject.toml").read_text(encoding="utf-8")
        name, version = _declared(pyproject, "name"), _declared(pyproject, "version")
        dist_info = tmp_path / f"{name.replace('-', '_')}-{version}.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        target = _declared(pyproject, "speaking_guard")
        (dist_info / "entry_points.txt").write_text(
            f"[{ENTRY_POINT_GROUP}]\nspeaking_guard = {target}\n"
        )
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.syspath_prepend(str(EXAMPLE_PLUGIN / "src"))
        found = importlib.metadata.distribution(name)
    yield found
    clear_plugin_cache()


@pytest.fixture(scope="session")
def lab_calls() -> LabCalls:
    """The catalog's lab calls, each run once for the whole session (tests/lab_calls.py)."""
    return LabCalls()


@pytest.fixture(autouse=True)
def _structlog_left_as_found() -> Iterator[None]:
    """structlog.testing.capture_logs leaves structlog "configured" with its printing defaults,
    which would route the library's logs through a printer in every later test."""
    configured = structlog.is_configured()
    yield
    if not configured and structlog.is_configured():
        structlog.reset_defaults()


@pytest.fixture
def earlier_tests_garbage_collected() -> None:
    """Collect the garbage earlier tests left before this test's calls start.

    A provider plugin can leave a task whose exception nobody read (the Cartesia plugin's
    refused connection); when the collector frees it, asyncio logs "Task exception was never
    retrieved" into whatever call runs then. Tests that compare a call's livekit logs between
    two agents would see it in one of them.
    """
    gc.collect()
