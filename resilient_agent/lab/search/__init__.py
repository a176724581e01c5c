"""The lab's search engine, shared by ``--fuzz`` and ``--explore``.

A search draws calls, judges each by the catalog's contracts (:mod:`.verdict`), in worker
processes with ``--jobs`` (:mod:`.pool`), shrinks a failing call of an agent under test to a
smaller one that still breaks the same contract (:mod:`.shrink`), and reports per agent: a
summary, the exit code and a byte-identical JSON (:mod:`.summary`). A mode supplies only what
differs: how a call is drawn, what is simpler than a call, and how its findings read.
"""

from __future__ import annotations

from .pool import Here, JudgePool
from .shrink import PartSet, descend, fewer_parts, shrink_parts
from .summary import SearchReport, run_search_command, search_exit_code, write_search_json
from .verdict import AT_WAIT_BOUND, CONTRACTS, Verdict, contracts_broken, judge

__all__ = [
    "AT_WAIT_BOUND",
    "CONTRACTS",
    "Here",
    "JudgePool",
    "PartSet",
    "SearchReport",
    "Verdict",
    "contracts_broken",
    "descend",
    "fewer_parts",
    "judge",
    "run_search_command",
    "search_exit_code",
    "shrink_parts",
    "write_search_json",
]
