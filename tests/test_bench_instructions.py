"""``bench_instructions``: which of callgrind's files holds the counted call alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.bench_instructions import call_profile


def _dumps(directory: Path, *names: str) -> Path:
    for name in names:
        (directory / name).write_text("summary: 1\n")
    return directory


def test_the_call_is_the_main_threads_second_part(tmp_path: Path) -> None:
    # start-up before the first marker (.1), the call (.2), the exit (no part number), and a
    # model thread's files (-02), which are not counted
    _dumps(
        tmp_path,
        "callgrind.41.1-01",
        "callgrind.41.2-01",
        "callgrind.41-01",
        "callgrind.41.1-02",
        "callgrind.41.2-02",
        "callgrind.41-02",
        "callgrind.41",
    )
    assert call_profile(tmp_path, "Agent") == tmp_path / "callgrind.41.2-01"


@pytest.mark.parametrize(
    ("names", "dumps"),
    [
        # a third getppid() somewhere in the call: its second part is not the whole call
        (("callgrind.7.1-01", "callgrind.7.2-01", "callgrind.7.3-01", "callgrind.7-01"), 3),
        # no marker reached: the child never ran its call
        (("callgrind.7-01",), 0),
        (("callgrind.7.1-01", "callgrind.7-01"), 1),
    ],
)
def test_any_other_dumps_are_refused(tmp_path: Path, names: tuple[str, ...], dumps: int) -> None:
    with pytest.raises(RuntimeError, match=f"{dumps} times, not twice"):
        call_profile(_dumps(tmp_path, *names), "ResilientAgent")
