"""Replay a real call from livekit's session report (``resilient-agent replay``).

:func:`load_plan` reads ``SessionReport.to_dict()`` into a :class:`ReplayPlan`;
:func:`run_replay` runs it on the lab's virtual clock on any agent class, with its fidelity to
the recording (:attr:`ReplayRun.divergences`) and the lab's verdict (:attr:`ReplayRun.outcome`).
"""

from __future__ import annotations

from .plan import ReplayPlan, ReportError, load_plan, read_plan, read_report
from .run import ReplayRun, run_replay

__all__ = [
    "ReplayPlan",
    "ReplayRun",
    "ReportError",
    "load_plan",
    "read_plan",
    "read_report",
    "run_replay",
]
