"""The race lab: the catalog of voice-agent races and the ``resilient-agent lab`` command."""

from __future__ import annotations
