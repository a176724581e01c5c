"""Seeded delivery schedules: the lab's independent sources made late, as production makes them.

On virtual time every call is one fixed interleaving: the caller's frames, the VAD's inferences,
the STT's, LLM's and TTS's answers each arrive exactly when their script says, and deliveries due
at the same instant run in the order they were scheduled. A production call differs from the next
in exactly these orders and in small lateness of each delivery. A :class:`Schedule` draws, from a
seed, which deliveries of each source arrive late and by how much; the lab's fakes wait at their
delivery points for :func:`delivery_wait`, so a schedule changes nothing but when a source hands its
next item to livekit. A source's own deliveries never overtake each other (each source delivers
from one task, in order), and nothing inside livekit or the library is reordered: what changes
is only what a busy worker process or a network already varies.

A tiny lateness (tens of microseconds) reorders a delivery after the others ready at the same
instant; a larger one (up to the source's bound) moves it across the frames around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import random
import re
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "SOURCES",
    "Delivery",
    "DeliveryJitter",
    "Exploration",
    "Schedule",
    "ScheduledDeliveries",
    "delivery_wait",
    "explored",
]

# A delivery: (source, its index among that source's deliveries in the call).
Delivery = tuple[str, int]

# Lateness that only reorders a delivery among those ready at the same instant.
_REORDER_S = (1e-5, 1e-4)


@dataclass(frozen=True)
class DeliveryJitter:
    """How a schedule moves one source's deliveries, and why that is production-possible.

    Attributes:
        reorder_rate: The share of its deliveries put after the others ready at the same
            instant (late by tens of microseconds).
        late_rate: The share of its deliveries made late by up to ``max_late_s``.
        max_late_s: The most one delivery is made late.
        why: What makes the source's deliveries late in a real call (docs/lab.md).
    """

    reorder_rate: float
    late_rate: float
    max_late_s: float
    why: str


SOURCES: Mapping[str, DeliveryJitter] = MappingProxyType(
    {
        "caller_audio": DeliveryJitter(
            0.1,
            0.02,
            0.005,
            "RoomIO hands each frame from the WebRTC jitter buffer to the session's event loop, "
            "which picks it up when it is next free",
        ),
        "vad": DeliveryJitter(
            0.1,
            0.02,
            0.008,
            "livekit's VAD infers in a worker thread; its result reaches the loop after the "
            "inference, which takes longer on a loaded core",
        ),
        "stt": DeliveryJitter(
            0.1,
            0.03,
            0.04,
            "a streaming STT answers over a websocket: each answer crosses the network on its own",
        ),
        "llm": DeliveryJitter(
            0.3,
            0.3,
            0.04,
            "the LLM's first token and each later chunk cross the network on their own",
        ),
        "tts": DeliveryJitter(
            0.3, 0.3, 0.04, "the TTS's first audio crosses the network on its own"
        ),
        "realtime": DeliveryJitter(
            0.2,
            0.2,
            0.04,
            "a realtime model's server events (audio, transcript, tool calls) cross the network "
            "on their own",
        ),
    }
)

_TOKEN = re.compile(r"^(\d+)(?::(.*))?$")
_KEY = re.compile(r"^([a-z_]+)#(\d+)$")


@dataclass(frozen=True)
class Schedule:
    """One seeded schedule, or the part of one that a shrunk failure keeps.

    Attributes:
        seed: Draws every source's lateness, delivery by delivery.
        keep: The only deliveries made late (the others arrive on time), or None for every one
            the seed draws.
    """

    seed: int
    keep: frozenset[Delivery] | None = None

    def token(self) -> str:
        """The text ``--schedule`` takes to replay this schedule: ``SEED`` or ``SEED:keys``."""
        if self.keep is None:
            return str(self.seed)
        keys = "+".join(f"{source}#{index}" for source, index in sorted(self.keep))
        return f"{self.seed}:{keys}"

    @classmethod
    def parse(cls, token: str) -> Schedule:
        """The schedule a :meth:`token` names.

        Raises:
            ValueError: ``token`` is not ``SEED`` or ``SEED:source#index+...``; the message
                names the part and the sources there are.
        """
        match = _TOKEN.match(token.strip())
        if match is None:
            raise ValueError(
                f"schedule {token!r}: give SEED or SEED:source#index+... (as the explorer prints)"
            )
        seed, keys = int(match.group(1)), match.group(2)
        if keys is None:
            return cls(seed)
        keep = set()
        for part in filter(None, keys.split("+")):
            key = _KEY.match(part)
            if key is None or key.group(1) not in SOURCES:
                raise ValueError(
                    f"schedule {token!r}: {part!r} is not source#index with a source of "
                    f"{', '.join(SOURCES)}"
                )
            keep.add((key.group(1), int(key.group(2))))
        return cls(seed, frozenset(keep))


@dataclass
class _SourceDraws:
    """One source's deliveries in one call: its jitter, its stream of draws, how many so far."""

    jitter: DeliveryJitter
    draws: random.Random
    count: int = 0


@dataclass
class ScheduledDeliveries:
    """The deliveries of one call under a :class:`Schedule`: counted, drawn and recorded.

    Attributes:
        schedule: The schedule being followed.
        late: Every delivery made late, in the order it happened, with its lateness.
    """

    schedule: Schedule
    late: list[tuple[Delivery, float]] = field(default_factory=list)
    _sources: dict[str, _SourceDraws] = field(default_factory=dict)

    def lateness(self, source: str) -> float:
        """Seconds the next delivery of ``source`` is late (0.0 when it is on time)."""
        drawn = self._sources.get(source)
        if drawn is None:
            drawn = self._sources[source] = _SourceDraws(
                SOURCES[source], random.Random(f"{self.schedule.seed}/{source}")
            )
        index = drawn.count
        drawn.count = index + 1
        jitter = drawn.jitter
        # two draws per delivery whether or not it is late: a delivery's lateness depends only
        # on the seed, the source and its index, so a shrunk schedule keeps the values it had
        hit, amount = drawn.draws.random(), drawn.draws.random()
        if hit >= jitter.reorder_rate + jitter.late_rate:
            return 0.0
        keep = self.schedule.keep
        if keep is not None and (source, index) not in keep:
            return 0.0
        low, high = _REORDER_S if hit < jitter.reorder_rate else (0.0, jitter.max_late_s)
        late = low + amount * (high - low)
        self.late.append(((source, index), late))
        return late


@dataclass
class Exploration:
    """The calls run under one :class:`Schedule`; each call (each event loop) draws afresh.

    Attributes:
        schedule: The schedule every call follows.
        calls: Each call's deliveries, in the order the calls started.
    """

    schedule: Schedule
    calls: list[ScheduledDeliveries] = field(default_factory=list)
    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ScheduledDeliveries] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    # the loop asked last and its deliveries: the fakes ask on every frame, from one call at a time
    _last: tuple[weakref.ref[asyncio.AbstractEventLoop], ScheduledDeliveries] | None = None

    def deliveries(self, loop: asyncio.AbstractEventLoop) -> ScheduledDeliveries:
        """The deliveries of the call running on ``loop``."""
        last = self._last
        if last is not None and last[0]() is loop:
            return last[1]
        found = self._by_loop.get(loop)
        if found is None:
            found = self._by_loop[loop] = ScheduledDeliveries(self.schedule)
            self.calls.append(found)
        self._last = (weakref.ref(loop), found)
        return found

    @property
    def late(self) -> list[tuple[Delivery, float]]:
        """Every delivery made late, over all the calls."""
        return [late for call in self.calls for late in call.late]


_ACTIVE: contextvars.ContextVar[Exploration | None] = contextvars.ContextVar(
    "resilient_agent_schedule", default=None
)


@contextlib.contextmanager
def explored(schedule: Schedule | None) -> Iterator[Exploration | None]:
    """Run the calls started inside this block under ``schedule`` (None: the lab's own timing).

    Yields:
        The record of the deliveries the block's calls made late, or None without a schedule.
    """
    exploration = Exploration(schedule) if schedule is not None else None
    token = _ACTIVE.set(exploration)
    try:
        yield exploration
    finally:
        _ACTIVE.reset(token)


def delivery_wait(source: str, delay: float) -> float:
    """Seconds to wait for the next delivery of ``source``: ``delay``, plus its lateness.

    Without a schedule this is the fake's own wait, so the lab's timelines do not move. A plain
    function, not a coroutine: the fakes call it on every frame, and a coroutine object per
    frame would be garbage the agents under test pay for in collections.

    Args:
        source: A key of :data:`SOURCES`.
        delay: Seconds until the delivery is due; not positive when it is due already.

    Returns:
        The wait, 0.0 when the delivery is due and on time (the fake then goes on at once, or
        yields once if it always did).
    """
    exploration = _ACTIVE.get()
    if exploration is None:
        return max(delay, 0.0)
    # late relative to when it would have arrived: an overdue delivery is late from now
    late = exploration.deliveries(asyncio.get_running_loop()).lateness(source)
    return max(delay, 0.0) + late
