"""The interception layer: one table, LIFO restore, restore only what is still ours."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from resilient_agent._livekit.interception import INTERCEPTIONS, Interceptor

ROOT = Path(__file__).resolve().parents[1]


class _Session:
    def shutdown(self, *, drain: bool = True) -> str:
        return "livekit"


def _tagging(tag: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def shadow(original: Callable[..., Any]) -> Callable[..., Any]:
        def shutdown(*, drain: bool = True) -> str:
            return f"{tag}({original(drain=drain)})"

        return shutdown

    return shadow


def test_shadows_stack_and_restore_last_installed_first() -> None:
    session = _Session()
    interceptor = Interceptor()
    interceptor.install("AgentSession.shutdown", session, _tagging("a"))
    interceptor.install("AgentSession.shutdown", session, _tagging("b"))
    assert session.shutdown() == "b(a(livekit))"
    assert interceptor.installed == ("AgentSession.shutdown", "AgentSession.shutdown")
    interceptor.restore_all()
    assert "shutdown" not in vars(session)
    assert session.shutdown() == "livekit"


def test_a_shadow_that_was_there_before_is_put_back() -> None:
    session = _Session()
    earlier = Interceptor()
    earlier.install("AgentSession.shutdown", session, _tagging("app"))
    ours = Interceptor()
    ours.install("AgentSession.shutdown", session, _tagging("ours"))
    ours.restore_all()
    assert session.shutdown() == "app(livekit)"


def test_a_shadow_installed_after_ours_is_left_in_place_and_the_reason_logged() -> None:
    session = _Session()
    ours = Interceptor()
    ours.install("AgentSession.shutdown", session, _tagging("ours"))

    def later(*, drain: bool = True) -> str:
        return "later"

    session.shutdown = later  # type: ignore[method-assign]
    with capture_logs() as logs:
        ours.restore_all()
    assert vars(session)["shutdown"] is later
    skipped = [e for e in logs if e.get("event") == "interception_not_restored"]
    assert skipped and skipped[0]["interception"] == "AgentSession.shutdown"
    assert "left in place" in skipped[0]["why"]


def test_only_listed_interceptions_can_be_installed() -> None:
    with pytest.raises(KeyError):
        Interceptor().install("AgentSession.start", _Session(), _tagging("x"))


def test_every_interception_says_why_and_which_hook_it_asks() -> None:
    import dataclasses

    from resilient_agent import HOOKS, MiddlewareContext

    # a hook of the chain, or a service of the middleware's context
    served = {*HOOKS, *(f.name for f in dataclasses.fields(MiddlewareContext))}
    for key, spec in INTERCEPTIONS.items():
        hooks = [hook.strip() for hook in spec.hook.split(",")]
        assert spec.why and hooks and all(hook in served for hook in hooks), key


class _Input:
    """Stands in for an audio input whose class is swapped."""


class _Observed(_Input):
    pass


def test_a_class_swap_is_restored_with_the_shadows_last_first() -> None:
    audio, session = _Input(), _Session()
    ours = Interceptor()
    ours.swap_class("AudioInput.__class__", audio, _Observed)
    ours.install("AgentSession.shutdown", session, _tagging("ours"))
    assert type(audio) is _Observed
    assert ours.installed == ("AudioInput.__class__", "AgentSession.shutdown")
    ours.restore_all()
    assert type(audio) is _Input and "shutdown" not in vars(session)


def test_a_class_swap_lays_the_instances_attributes_out_anew_each_way() -> None:
    # CPython 3.11+ reads the attributes of an instance whose class was assigned on its slow
    # path, unless the instance has a dict made after the assignment (benchmarks measure it)
    audio = _Input()
    audio.sample_rate = 24000  # type: ignore[attr-defined]
    made_with = vars(audio)
    ours = Interceptor()
    ours.swap_class("AudioInput.__class__", audio, _Observed)
    observed = vars(audio)
    assert observed is not made_with and observed == {"sample_rate": 24000}
    ours.restore_all()
    assert type(audio) is _Input
    assert vars(audio) is not observed and vars(audio) == {"sample_rate": 24000}


def test_a_class_swap_of_an_instance_with_slots_only_keeps_its_attributes() -> None:
    class Slotted:
        __slots__ = ("sample_rate",)

        def __init__(self) -> None:
            self.sample_rate = 24000

    class ObservedSlotted(Slotted):
        __slots__ = ()

    audio = Slotted()
    ours = Interceptor()
    ours.swap_class("AudioInput.__class__", audio, ObservedSlotted)
    assert type(audio) is ObservedSlotted and audio.sample_rate == 24000
    ours.restore_all()
    assert type(audio) is Slotted and audio.sample_rate == 24000


def test_a_class_swap_is_not_a_shadow_and_a_shadow_not_a_class_swap() -> None:
    with pytest.raises(KeyError):
        Interceptor().install("AudioInput.__class__", _Input(), _tagging("x"))
    with pytest.raises(KeyError):
        Interceptor().swap_class("AgentSession.shutdown", _Session(), _Observed)


def test_livekit_objects_are_modified_only_by_the_interception_module() -> None:
    # attribute assignments on objects the library does not own (its own agent subclass and its
    # tool wrappers aside); the lab's job stand-in is a test double, not runtime code
    found = subprocess.run(
        [
            "grep",
            "-rnE",
            r"\.(shutdown|aclose|interrupt|disallow_interruptions|generate_reply)\s*=[^=]|setattr\(",
            "resilient_agent",
            "middleware",
            "--include=*.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    runtime = [
        line
        for line in found
        if not line.startswith(
            ("resilient_agent/testing/", "resilient_agent/_livekit/interception.py")
        )
        and "setattr(self, attr, wrap_tool" not in line
        and "_WRAPPED_MARK" not in line
        and "_OPTED_OUT" not in line  # a marker on the app's own agent (unsupervised)
        and "_NEVER_WAITS" not in line  # a marker on a middleware's own hook function
        # the offline room double's wiring (testing/room.py), never a live session's objects
        and "setattr(room, _ROOM_LOCAL_PARTICIPANT" not in line
        and "setattr(publication, _PUBLICATION_TRACK" not in line
        # the lab's own recordings (testing/runner.py): the recorder of a lab call, never a live one
        and "setattr(put_owner, put_name, placed)" not in line
    ]
    assert runtime == []
