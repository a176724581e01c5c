"""The race lab: the catalog, its runner and reports, and the races on an app's own tools."""

from __future__ import annotations

from .app_tools import ToolMocks
from .catalog.own_tools import race_own_tools

__all__ = ["ToolMocks", "race_own_tools"]
