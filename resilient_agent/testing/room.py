"""An offline ``rtc.Room`` for livekit components that publish a track of their own.

``BackgroundAudioPlayer.start(room=...)`` publishes its audio track on
``room.local_participant`` and unpublishes it on ``aclose()``; nothing else of the room is used.
:class:`OfflineRoom` is a real ``rtc.Room`` that never connects, whose local participant
publishes and unpublishes tracks without a server and keeps them for the test to inspect::

    room = OfflineRoom()
    player = BackgroundAudioPlayer(thinking_sound=TracedSound(clock=call_clock))
    await player.start(room=room, agent_session=session)
    assert room.local_participant.published

:class:`TracedSound` is an endless tone to hand such a player as its sound: each frame the
player's mixer pulls is stamped with the call second, the evidence that the sound was played.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import numpy as np
from livekit import rtc
from typing_extensions import override

from .._livekit.compat import (
    link_publication_track,
    local_track_publications,
    room_event_queue,
    set_room_local_participant,
    set_room_name,
    unowned_participant,
    unowned_track_publication,
)

__all__ = ["OfflineLocalParticipant", "OfflineRoom", "TracedSound"]

# BackgroundAudioPlayer mixes at 48 kHz mono
_SAMPLE_RATE = 48_000
_FRAME_S = 0.01
_TONE_HZ = 440.0
_TONE_AMPLITUDE = 3_000


class OfflineLocalParticipant(rtc.LocalParticipant):
    """A local participant that publishes tracks without a server.

    Attributes:
        published: Every track published, with its options, in order.
        unpublished: The sid of every track unpublished, in order.
    """

    def __init__(self, room: OfflineRoom, identity: str) -> None:
        # on livekit's invalid handle: nothing native is owned or ever dropped
        super().__init__(room_event_queue(room), unowned_participant(identity))
        self.published: list[tuple[rtc.LocalTrack, rtc.TrackPublishOptions]] = []
        self.unpublished: list[str] = []

    @override
    async def publish_track(
        self, track: rtc.LocalTrack, options: rtc.TrackPublishOptions | None = None
    ) -> rtc.LocalTrackPublication:
        """Publish ``track`` at once, as a connected room would once the server acknowledged it.

        Args:
            track: The track to publish.
            options: How to publish it; livekit's defaults if None.
        """
        options = options if options is not None else rtc.TrackPublishOptions()
        sid = f"TR_offline{len(self.published)}"
        publication = rtc.LocalTrackPublication(
            unowned_track_publication(
                sid=sid, name=track.name, kind=track.kind, source=options.source
            )
        )
        link_publication_track(publication, track)  # as LocalParticipant.publish_track does
        local_track_publications(self)[sid] = publication
        self.published.append((track, options))
        return publication

    @override
    async def unpublish_track(self, track_sid: str) -> None:
        """Unpublish the track ``track_sid``.

        Args:
            track_sid: The sid its publication got.
        """
        local_track_publications(self).pop(track_sid, None)
        self.unpublished.append(track_sid)


class OfflineRoom(rtc.Room):
    """A room that never connects, whose local participant publishes tracks offline.

    Build it on the loop that will use it (``rtc.Room`` binds the running loop).
    """

    def __init__(self, *, name: str = "offline-room", identity: str = "agent") -> None:
        super().__init__()
        set_room_name(self, name)
        self._offline_participant = OfflineLocalParticipant(self, identity)
        set_room_local_participant(self, self._offline_participant)

    @property
    @override
    def local_participant(self) -> OfflineLocalParticipant:
        """The offline local participant (never None: there is no connection to wait for)."""
        return self._offline_participant


class TracedSound(AsyncIterator[rtc.AudioFrame]):
    """An endless 48 kHz mono tone that stamps each frame pulled from it with the call second.

    Attributes:
        pulled_at: The call second of every frame pulled, in order.
    """

    def __init__(self, *, clock: Callable[[], float]) -> None:
        """Build the sound.

        Args:
            clock: The call's clock: seconds since the call started.
        """
        self._clock = clock
        samples = round(_SAMPLE_RATE * _FRAME_S)
        t = np.arange(samples) / _SAMPLE_RATE
        self._frame = (np.sin(2 * np.pi * _TONE_HZ * t) * _TONE_AMPLITUDE).astype(np.int16)
        self.pulled_at: list[float] = []

    @override
    def __aiter__(self) -> TracedSound:
        return self

    @override
    async def __anext__(self) -> rtc.AudioFrame:
        self.pulled_at.append(self._clock())
        return rtc.AudioFrame(
            self._frame.tobytes(), _SAMPLE_RATE, 1, samples_per_channel=len(self._frame)
        )
