"""``callgrind_diff``: a callgrind file's instructions by function and object file, per turn."""

from __future__ import annotations

from pathlib import Path

from benchmarks.bench_instructions import profile_name
from benchmarks.callgrind_diff import costs, per_turn

# main (in libpython) runs 10 instructions itself and calls dot (in numpy) twice, 40 in all;
# names are compressed as callgrind writes them: "(id) name" once, "(id)" after
_PROFILE = """\
version: 1
creator: callgrind-3.19.0
positions: line
events: Ir
summary: {total}

ob=(1) /usr/lib/libpython3.11.so.1.0
fl=(1) ceval.c
fn=(1) main
16 {main_self}
cob=(2) /site-packages/numpy/_multiarray_umath.so
cfl=(2) dot.c
cfn=(2) array_dot
calls=2 5
16 {dot}
+2 1

ob=(2)
fl=(2)
fn=(2)
5 {dot}
"""


def _write(path: Path, main_self: int, dot: int) -> Path:
    path.write_text(_PROFILE.format(total=main_self + 1 + dot, main_self=main_self, dot=dot))
    return path


def test_costs_split_a_call_from_the_callers_own_instructions(tmp_path: Path) -> None:
    found = costs(_write(tmp_path / "one.callgrind", main_self=10, dot=40))
    assert found.exclusive == {"main": 11, "array_dot": 40}
    assert found.inclusive == {"main": 51, "array_dot": 40}
    assert found.by_object == {"libpython3.11.so.1.0": 11, "_multiarray_umath.so": 40}


def test_per_turn_is_the_long_call_minus_the_two_turn_call(tmp_path: Path) -> None:
    _write(tmp_path / profile_name("Agent", 12), main_self=1010, dot=40)
    _write(tmp_path / profile_name("Agent", 2), main_self=10, dot=20)
    by_object, exclusive, inclusive = per_turn(tmp_path, "Agent", 12)
    assert exclusive == {"main": 100.0, "array_dot": 2.0}
    assert inclusive == {"main": 102.0, "array_dot": 2.0}
    assert by_object["libpython3.11.so.1.0"] == 100.0


def test_a_variants_label_makes_a_file_name() -> None:
    assert profile_name("  interception layer alone (middleware=[])", 2) == (
        "interception-layer-alone-middleware-2.callgrind"
    )
