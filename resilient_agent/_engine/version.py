"""resilient-agent's own version (the package's, read by setuptools from here)."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
