"""Every private livekit-agents name the project touches, and every livekit behaviour it relies on.

Private names change between minor releases. Each accessor here degrades to None instead of
raising, and ``tests/test_compat.py`` fails loudly when livekit moves one, so an upgrade is
caught by CI, not by a caller. The offline room's builders (``resilient_agent.testing.room``, a
test double only) are the exception: a room double cannot half-work, so they raise
:class:`LivekitMoved` naming what moved.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from livekit import rtc
from livekit.agents.voice import agent_activity
from livekit.agents.voice.speech_handle import SpeechHandle
from opentelemetry import context as otel_context

from .._engine.fanout import NOT_KNOWN

if TYPE_CHECKING:
    from livekit.rtc._proto import participant_pb2, track_pb2

__all__ = [
    "RELIED_ON",
    "LivekitMoved",
    "Reliance",
    "close_as_caller_left",
    "event_listeners",
    "frame_buffer",
    "last_event_listener",
    "inference_speech",
    "link_publication_track",
    "livekit_session_report",
    "local_track_publications",
    "plugin_client",
    "plugin_options",
    "queued_speeches",
    "redirect_realtime_http",
    "room_event_queue",
    "session_closing",
    "session_trace_context",
    "set_room_local_participant",
    "set_room_name",
    "speech_interrupted_future",
    "tool_call_releasable",
    "speech_scheduled_future",
    "unowned_participant",
    "unowned_track_publication",
]


def _future(handle: SpeechHandle, name: str) -> asyncio.Future[Any] | None:
    future = getattr(handle, name, None)
    return future if isinstance(future, asyncio.Future) else None


def speech_scheduled_future(handle: SpeechHandle) -> asyncio.Future[Any] | None:
    """Done when livekit queued the speech for playout (``SpeechHandle._scheduled_fut``).

    livekit has no event for it; the lab's timelines use it to draw the queued stretch.
    """
    return _future(handle, "_scheduled_fut")


def speech_interrupted_future(handle: SpeechHandle) -> asyncio.Future[Any] | None:
    """Done when the speech was interrupted (``SpeechHandle._interrupt_fut``).

    ``SpeechHandle.interrupted`` tells whether, not when; the lab's timelines need when.
    """
    return _future(handle, "_interrupt_fut")


_SPEECH_CONTEXT_VAR = "_SpeechHandleContextVar"


def inference_speech() -> SpeechHandle | None:
    """The speech whose task is running now (``agent_activity._SpeechHandleContextVar``).

    livekit sets it on every task it creates for a speech, so an ``llm_node`` call reads the
    speech its reply belongs to (a tool reply's is the speech that called the tool). livekit
    passes the node no handle. None outside a speech's task, or if livekit moved it.
    """
    var = getattr(agent_activity, _SPEECH_CONTEXT_VAR, None)
    if not isinstance(var, contextvars.ContextVar):
        return None
    handle = var.get(None)
    return handle if isinstance(handle, SpeechHandle) else None


_SPEECH_QUEUE = "_speech_q"


def queued_speeches(session: Any) -> list[SpeechHandle] | None:
    """The speeches livekit queued for playout, in the order it plays them.

    ``AgentSession._activity._speech_q``: a heap of ``(-priority, scheduled_ns, handle)``, the
    queue ``AgentActivity.interrupt()`` walks after the current speech. livekit has no public
    view of it (``session.current_speech`` is only its head, once popped). None if livekit
    moved it.
    """
    queue = getattr(getattr(session, "_activity", None), _SPEECH_QUEUE, None)
    if not isinstance(queue, list):
        return None
    try:
        ordered = sorted(queue, key=lambda item: (item[0], item[1]))
        return [item[2] for item in ordered if isinstance(item[2], SpeechHandle)]
    except (TypeError, IndexError):
        return None


def session_closing(session: Any) -> bool:
    """Whether livekit has begun closing ``session`` (``AgentSession._is_closing()``).

    livekit emits ``close`` only at the end of its close (which waits up to
    ``session_close_transcript_timeout`` for the caller's last words); a hang-up asked for in
    between (livekit's ``EndCallTool`` reacting to the farewell interrupted by the close) is not
    the app's decision any more. False if livekit moved it.
    """
    is_closing = getattr(session, "_is_closing", None)
    return bool(is_closing()) if callable(is_closing) else False


_ROOT_SPAN_CONTEXT = "_root_span_context"


def session_trace_context(session: Any) -> otel_context.Context | None:
    """The trace context whose current span is ``session``'s ``agent_session`` span.

    ``AgentSession._root_span_context``, set while the session runs and cleared at its close.
    livekit's public helper (``telemetry.session_context.session_root_context``, absent from
    1.8.0) reads the same attribute, but of the job's primary session only; a race belongs to
    the session it happened in. None if livekit moved it, or when the session is not running.
    """
    context = getattr(session, _ROOT_SPAN_CONTEXT, None)
    return context if isinstance(context, otel_context.Context) else None


_FIRST_UPDATE = "_first_update_fut"


def tool_call_releasable(run_context: Any) -> bool:
    """Whether a ``RunContext.update()`` now would release the running tool call.

    livekit's tool executor answers the call with the first ``update()`` (its
    ``RunContext._first_update_fut``): the turn stops waiting for the tool, and the tool's return
    value arrives later as a deferred reply. A later ``update()`` only adds a progress report, and
    a call run without an executor (``execute_function_call``, mocks) has nothing to release.
    False if livekit moved it.
    """
    first_update = getattr(run_context, _FIRST_UPDATE, None)
    return isinstance(first_update, asyncio.Future) and not first_update.done()


_FRAME_BUFFER = "_data"


def frame_buffer_reader() -> Callable[[rtc.AudioFrame], Any]:
    """What reads an audio frame's samples as a buffer: ``AudioFrame._data`` where it is that.

    ``frame.data`` makes three memoryviews of ``_data`` at every read; a level measured on
    every frame of the caller's line reads the buffer they view instead. The public ``data``
    if livekit moved it (the same samples, as int16 memoryview).
    """
    probe = rtc.AudioFrame(b"\x01\x00\x02\x00", 16000, 1, 2)
    held = getattr(probe, _FRAME_BUFFER, None)
    if held is not None and held is probe.data.obj:
        return operator.attrgetter(_FRAME_BUFFER)
    return operator.attrgetter("data")


frame_buffer: Callable[[rtc.AudioFrame], Any] = frame_buffer_reader()
"""``frame``'s samples as a buffer of int16 (see :func:`frame_buffer_reader`)."""


_LISTENERS = "_events"


def event_listeners(emitter: Any, event: str) -> list[Any] | None:
    """The callbacks registered on ``emitter`` for ``event``, as ``off()`` takes them.

    livekit's ``EventEmitter._events`` maps each event to its callbacks (a ``once()`` callback
    is stored as its wrapper, which ``off()`` removes). None if livekit moved it.
    """
    events = getattr(emitter, _LISTENERS, None)
    if not isinstance(events, dict):
        return None
    return list(events.get(event, ()))


def last_event_listener(emitter: Any, event: str) -> Any:
    """The callback registered last on ``emitter`` for ``event`` (None if none).

    Read from livekit's ``EventEmitter._events`` (an insertion-ordered dict per event, the
    order ``emit`` calls them in); ``fanout.NOT_KNOWN`` if livekit moved it.
    """
    events = getattr(emitter, _LISTENERS, None)
    if not isinstance(events, dict):
        return NOT_KNOWN
    callbacks = events.get(event)
    if not callbacks:
        return None
    if not isinstance(callbacks, dict):
        # livekit-agents 1.8.0's rtc keeps a set: no registration order to join a run by
        return NOT_KNOWN
    return next(reversed(callbacks))


def close_as_caller_left(session: Any) -> bool:
    """Close ``session`` the way RoomIO does when the caller leaves the room.

    RoomIO calls ``AgentSession._close_soon(reason=CloseReason.PARTICIPANT_DISCONNECTED)``; the
    lab has no room, so its caller leaves through this. False if livekit moved it.
    """
    from livekit.agents.voice.events import CloseReason

    close_soon = getattr(session, "_close_soon", None)
    if close_soon is None:
        return False
    close_soon(reason=CloseReason.PARTICIPANT_DISCONNECTED)
    return True


def livekit_session_report(
    session: Any, *, job_id: str, room_id: str, room: str, agent_name: str = ""
) -> Any:
    """Livekit's own ``JobContext.make_session_report`` for ``session``, run outside a job.

    The method reads the job's ids, its tagger and the session's private event record,
    start time and recorder; a stand-in job context gives it the first two, so the report is
    built by livekit's code exactly as ``on_session_end`` gets it. None if livekit moved it.
    """
    from types import SimpleNamespace

    from livekit.agents import JobContext

    make = getattr(JobContext, "make_session_report", None)
    if make is None or not hasattr(session, "_recorded_events"):
        return None
    stand_in = SimpleNamespace(
        job=SimpleNamespace(
            id=job_id, room=SimpleNamespace(sid=room_id, name=room), agent_name=agent_name
        ),
        _primary_agent_session=session,
        _tagger=SimpleNamespace(tags=set()),
    )
    return make(stand_in, session)


_RECORDER_PUT = "_put"
# livekit-agents 1.8.0 has no _put: it queues onto this queue's put_nowait
_RECORDER_QUEUE = "_q"
_AGENT_CHANNEL = 1


def place_played_audio(recorder: Any, to_wall: Callable[[float], float]) -> bool:
    """Have livekit's recorder place the agent's played audio at ``to_wall`` of its stamp.

    ``RecorderIO`` writes the agent's channel where the audio output says it played
    (``on_playback_started``'s ``created_at``, a wall-clock time); the lab's speaker stamps
    loop time there (livekit's session reads it), so the recorder's queue (``RecorderIO._put``,
    items with ``channel`` and ``started_at``) gets the agent's audio moved to wall time.
    False if livekit moved it.
    """
    put_owner, put_name = recorder, _RECORDER_PUT
    put = getattr(put_owner, put_name, None)
    if not callable(put):
        # livekit-agents 1.8.0 queues its items straight onto the recorder's one queue
        put_owner, put_name = getattr(recorder, _RECORDER_QUEUE, None), "put_nowait"
        put = getattr(put_owner, put_name, None)
        if not callable(put):
            return False

    def placed(item: Any) -> None:
        started_at = getattr(item, "started_at", None)
        if getattr(item, "channel", None) == _AGENT_CHANNEL and isinstance(started_at, float):
            item = dataclasses.replace(item, started_at=to_wall(started_at))
        put(item)

    setattr(put_owner, put_name, placed)
    return True


# -- the offline room: an rtc.Room that never connects (resilient_agent.testing.room) ----------


class LivekitMoved(RuntimeError):
    """livekit moved a private name the offline room is built on; the message says which."""


# the invalid handle (``livekit.rtc._ffi_client.INVALID_HANDLE``): nothing native is owned, so
# nothing is ever dropped when the participant or publication built on it is collected
_UNOWNED_HANDLE = 0
_PROTO = "livekit.rtc._proto"
_ROOM_QUEUE = "_room_queue"
_ROOM_INFO = "_info"
_ROOM_LOCAL_PARTICIPANT = "_local_participant"
_PUBLICATION_TRACK = "_track"
_TRACK_PUBLICATIONS = "_track_publications"


def redirect_realtime_http(model: Any, http_options: Any, api_key: str) -> bool:
    """Point an app's own Gemini Live model (livekit-plugins-google) at ``http_options``.

    The plugin reads ``_opts.http_options`` and ``_opts.api_key`` each time it opens a session
    and has no public setter for them; the lab redirects the app's instance to its emulator, so
    the app's own options (voice, tools, instructions) stay. False when the options moved.
    """
    options = getattr(model, "_opts", None)
    if options is None or not hasattr(options, "http_options") or not hasattr(options, "api_key"):
        return False
    options.http_options = http_options
    options.api_key = api_key
    return True


def plugin_options(plugin: Any, *fields: str) -> Any | None:
    """A provider plugin's options object (``_opts``), if it still has every one of ``fields``.

    The lab points an app's own Cartesia TTS (``base_url``) and Google LLM (``http_options``,
    ``vertexai``) at its emulators; neither plugin has a public setter for them, and both read
    them from ``_opts`` at each connection or request. None when livekit moved them.
    """
    options = getattr(plugin, "_opts", None)
    if options is None or not all(hasattr(options, name) for name in fields):
        return None
    return options


def plugin_client(plugin: Any) -> Any | None:
    """The ``openai.AsyncClient`` an OpenAI plugin (``openai.LLM``, ``openai.STT``) sends with.

    The plugins keep it as ``_client`` and read nothing else for the endpoint; the client's own
    ``base_url`` is public (the openai SDK's setter). None when livekit moved it.
    """
    client = getattr(plugin, "_client", None)
    return client if client is not None and hasattr(client, "base_url") else None


def _proto(module: str, *messages: str) -> Any:
    import importlib

    name = f"{_PROTO}.{module}"
    try:
        found = importlib.import_module(name)
    except ImportError as error:
        raise LivekitMoved(f"{name} is gone") from error
    for message in messages:
        if not hasattr(found, message):
            raise LivekitMoved(f"{name} has no {message}")
    return found


def _private(owner: object, livekit_class: str, name: str) -> Any:
    if not hasattr(owner, name):
        raise LivekitMoved(f"rtc.{livekit_class} has no {name}")
    return getattr(owner, name)


def unowned_participant(identity: str) -> participant_pb2.OwnedParticipant:
    """The proto ``rtc.LocalParticipant(...)`` is built from, owning no native participant.

    A connected room gets it from the server (``OwnedParticipant`` on the invalid handle 0, with
    ``ParticipantInfo(sid="PA_<identity>", identity=identity)``).

    Args:
        identity: The participant's identity.

    Raises:
        LivekitMoved: livekit moved the proto module or one of its message types.
    """
    handles = _proto("handle_pb2", "FfiOwnedHandle")
    participants = _proto("participant_pb2", "OwnedParticipant", "ParticipantInfo")
    info = participants.ParticipantInfo(sid=f"PA_{identity}", identity=identity)
    handle = handles.FfiOwnedHandle(id=_UNOWNED_HANDLE)
    owned: participant_pb2.OwnedParticipant = participants.OwnedParticipant(
        handle=handle, info=info
    )
    return owned


def unowned_track_publication(
    *, sid: str, name: str, kind: int, source: int
) -> track_pb2.OwnedTrackPublication:
    """The proto ``rtc.LocalTrackPublication(...)`` is built from, owning no native publication.

    ``OwnedTrackPublication`` on the invalid handle 0, with ``TrackPublicationInfo``.

    Args:
        sid: The publication's sid.
        name: The track's name.
        kind: The track's kind (``rtc.TrackKind``).
        source: The track's source (``rtc.TrackSource``).

    Raises:
        LivekitMoved: livekit moved the proto module or one of its message types.
    """
    handles = _proto("handle_pb2", "FfiOwnedHandle")
    tracks = _proto("track_pb2", "OwnedTrackPublication", "TrackPublicationInfo")
    info = tracks.TrackPublicationInfo(sid=sid, name=name, kind=kind, source=source)
    handle = handles.FfiOwnedHandle(id=_UNOWNED_HANDLE)
    owned: track_pb2.OwnedTrackPublication = tracks.OwnedTrackPublication(handle=handle, info=info)
    return owned


def room_event_queue(room: rtc.Room) -> Any:
    """The queue ``room`` forwards its native events through (``Room._room_queue``).

    ``rtc.LocalParticipant(room_queue, owned_info)`` takes it: the participant waits on it for
    the server's answers.

    Raises:
        LivekitMoved: livekit moved ``Room._room_queue``.
    """
    return _private(room, "Room", _ROOM_QUEUE)


def set_room_name(room: rtc.Room, name: str) -> None:
    """Name ``room`` as the server would on connect (``Room._info.name``, read by ``room.name``).

    Raises:
        LivekitMoved: livekit moved ``Room._info``.
    """
    _private(room, "Room", _ROOM_INFO).name = name


def set_room_local_participant(room: rtc.Room, participant: rtc.LocalParticipant) -> None:
    """Make ``participant`` ``room``'s own, as connecting does (``Room._local_participant``).

    Raises:
        LivekitMoved: livekit moved ``Room._local_participant``.
    """
    _private(room, "Room", _ROOM_LOCAL_PARTICIPANT)
    setattr(room, _ROOM_LOCAL_PARTICIPANT, participant)


def link_publication_track(publication: rtc.TrackPublication, track: rtc.Track) -> None:
    """Link ``publication`` to ``track``, as ``LocalParticipant.publish_track`` does.

    ``TrackPublication._track``, read by ``publication.track``.

    Raises:
        LivekitMoved: livekit moved ``TrackPublication._track``.
    """
    _private(publication, "TrackPublication", _PUBLICATION_TRACK)
    setattr(publication, _PUBLICATION_TRACK, track)


def local_track_publications(
    participant: rtc.LocalParticipant,
) -> dict[str, rtc.LocalTrackPublication]:
    """The publications map of ``participant`` (``LocalParticipant._track_publications``).

    The dict ``publish_track`` / ``unpublish_track`` add to and remove from, by sid;
    ``participant.track_publications`` is a read-only view of it.

    Raises:
        LivekitMoved: livekit moved ``LocalParticipant._track_publications``.
    """
    publications = _private(participant, "LocalParticipant", _TRACK_PUBLICATIONS)
    if not isinstance(publications, dict):
        raise LivekitMoved(f"rtc.LocalParticipant.{_TRACK_PUBLICATIONS} is not a dict")
    return publications


@dataclass(frozen=True)
class Reliance:
    """A livekit-agents fact the library is built on, and the tripwire that pins it.

    Attributes:
        what: The method or behaviour.
        used_by: The library's module that depends on it.
        change: The livekit change that breaks it (the tripwire's failure message).
        tripwire: The test in ``tests/test_compat.py`` that fails when it changes.
    """

    what: str
    used_by: str
    change: str
    tripwire: str


RELIED_ON: tuple[Reliance, ...] = (
    Reliance(
        "AgentSession.shutdown(*, drain=True) -> None",
        "resilient_agent._livekit.shutdown",
        "livekit changed AgentSession.shutdown's signature",
        "test_intercepted_methods_keep_their_signatures[AgentSession.shutdown]",
    ),
    Reliance(
        "AgentSession.aclose() -> coroutine",
        "resilient_agent._livekit.shutdown",
        "livekit changed AgentSession.aclose's signature",
        "test_intercepted_methods_keep_their_signatures[AgentSession.aclose]",
    ),
    Reliance(
        "JobContext.shutdown(reason='user requested') -> None",
        "resilient_agent._livekit.shutdown",
        "livekit changed JobContext.shutdown's signature",
        "test_intercepted_methods_keep_their_signatures[JobContext.shutdown]",
    ),
    Reliance(
        "AgentSession.interrupt(*, force=False) -> Future",
        "resilient_agent._livekit.speech_gates",
        "livekit changed AgentSession.interrupt's signature",
        "test_intercepted_methods_keep_their_signatures[AgentSession.interrupt]",
    ),
    Reliance(
        "AgentSession.generate_reply(*, user_input=..., ...) -> SpeechHandle",
        "resilient_agent._livekit.handoff_gates",
        "livekit changed AgentSession.generate_reply's signature",
        "test_intercepted_methods_keep_their_signatures[AgentSession.generate_reply]",
    ),
    Reliance(
        "AgentSession.say(text, *, audio=..., allow_interruptions=..., add_to_chat_ctx=True) "
        "-> SpeechHandle",
        "resilient_agent._livekit.protected_lines",
        "livekit changed AgentSession.say's signature",
        "test_intercepted_methods_keep_their_signatures[AgentSession.say]",
    ),
    Reliance(
        "RealtimeSession.push_audio(frame) -> None, called by livekit for every caller frame",
        "resilient_agent._session.model_input",
        "livekit changed RealtimeSession.push_audio's signature",
        "test_intercepted_methods_keep_their_signatures[RealtimeSession.push_audio]",
    ),
    Reliance(
        "RunContext.disallow_interruptions() -> None",
        "resilient_agent._livekit.speech_gates",
        "livekit changed RunContext.disallow_interruptions's signature",
        "test_intercepted_methods_keep_their_signatures[RunContext.disallow_interruptions]",
    ),
    Reliance(
        "Agent.on_enter() / Agent.on_exit() -> None, called by attribute on the agent",
        "resilient_agent._session.supervision",
        "livekit changed Agent.on_enter's signature (or no longer calls it by attribute)",
        "test_intercepted_methods_keep_their_signatures[Agent.on_enter]",
    ),
    Reliance(
        "Agent.on_exit() -> None, called by attribute on the agent",
        "resilient_agent._session.supervision",
        "livekit changed Agent.on_exit's signature",
        "test_intercepted_methods_keep_their_signatures[Agent.on_exit]",
    ),
    Reliance(
        "Agent.on_user_turn_completed(turn_ctx, new_message), called by attribute",
        "resilient_agent._session.supervision",
        "livekit changed Agent.on_user_turn_completed's signature",
        "test_intercepted_methods_keep_their_signatures[Agent.on_user_turn_completed]",
    ),
    Reliance(
        "Agent.llm_node(chat_ctx, tools, model_settings); livekit executes the tools the node "
        "leaves in its list",
        "resilient_agent._session.supervision",
        "livekit changed Agent.llm_node's signature",
        "test_intercepted_methods_keep_their_signatures[Agent.llm_node]",
    ),
    Reliance(
        "Agent.on_user_turn_exceeded(ev), called by attribute when user_turn_limit is reached",
        "resilient_agent._session.cut_in",
        "livekit changed Agent.on_user_turn_exceeded's signature",
        "test_intercepted_methods_keep_their_signatures[Agent.on_user_turn_exceeded]",
    ),
    Reliance(
        "a non-forced interrupt() raises RuntimeError on a protected speech",
        "resilient_agent._livekit.speech_gates (decide_interrupt)",
        "livekit no longer raises when interrupt() meets a protected speech",
        "test_interrupt_raises_on_a_protected_speech",
    ),
    Reliance(
        "protecting an interrupted speech raises RuntimeError",
        "middleware.tool_guard (decide_protection)",
        "livekit no longer refuses to protect an interrupted speech",
        "test_protecting_an_interrupted_speech_raises",
    ),
    Reliance(
        "disallow_interruptions() resumes a speech livekit paused for the caller, "
        "synchronously (since 1.8.0)",
        "resilient_agent._livekit.speech_gates (decide_resume), middleware.wait_for_caller",
        "livekit no longer resumes a paused speech inside disallow_interruptions()",
        "test_disallow_interruptions_resumes_a_paused_speech_at_once",
    ),
    Reliance(
        "AgentSession._is_closing() tells a close livekit began before its close event",
        "resilient_agent._livekit.shutdown",
        "livekit moved AgentSession._is_closing",
        "test_session_closing_is_where_compat_expects_it",
    ),
    Reliance(
        "SpeechHandle.wait_for_playout(), awaiting a handle, RunContext.wait_for_playout() "
        "and SpeechHandle.wait_if_not_interrupted() shield livekit's futures: a hook cancelled "
        "while it awaits them (its budget ran out, its task was cancelled) leaves the speech be",
        "resilient_agent._engine.boundary (hook budgets), resilient_agent.middleware",
        "livekit no longer shields the speech handle's futures from a cancelled awaiter",
        "test_awaiting_a_speech_never_cancels_it",
    ),
    Reliance(
        "EventEmitter._events maps an event to its callbacks, once() wrappers included, each "
        "removable with off(): a vetoed EndCallTool call's close listener is removed",
        "resilient_agent._session.tools (toolsets)",
        "livekit moved EventEmitter._events",
        "test_event_listeners_is_where_compat_expects_it",
    ),
    Reliance(
        "EventEmitter._events keeps each event's callbacks in registration order, the order "
        "emit() calls them in: the session's listeners added one after another are registered "
        "as one only while the run is the emitter's last listener",
        "resilient_agent._engine.fanout (through the runtime)",
        "livekit changed the order or place of EventEmitter._events",
        "test_last_event_listener_is_where_compat_expects_it",
    ),
    Reliance(
        "AgentSession._root_span_context is the context of the running session's agent_session "
        "span (cleared at its close)",
        "resilient_agent._session.tracing (races that outlived their span, the call report)",
        "livekit moved AgentSession._root_span_context",
        "test_session_trace_context_is_where_compat_expects_it",
    ),
    Reliance(
        "RunContext._first_update_fut is the executor's pending answer to a running tool call: "
        "the first RunContext.update() answers it (the turn stops waiting for the tool)",
        "middleware.tool_guard (releasing a tool whose speech the caller interrupted)",
        "livekit moved RunContext._first_update_fut",
        "test_tool_call_releasable_is_where_compat_expects_it",
    ),
    Reliance(
        "agent_activity._SpeechHandleContextVar holds, in the tasks livekit runs for a speech "
        "(its inferences among them), that speech's handle",
        "resilient_agent._session.chain_run (InferenceRequest.speech: ContextIntegrity leaves "
        "a question to another reply only while that reply's speech may still be heard)",
        "livekit moved agent_activity._SpeechHandleContextVar",
        "test_inference_speech_is_where_compat_expects_it",
    ),
    Reliance(
        "AgentSession._activity._speech_q is livekit's playout queue, a heap of (-priority, "
        "scheduled_ns, handle) that AgentActivity.interrupt() walks after the current speech",
        "resilient_agent._livekit.speech_gates (a deferred interrupt interrupts the queue)",
        "livekit moved AgentActivity._speech_q",
        "test_queued_speeches_is_where_compat_expects_it",
    ),
    Reliance(
        "livekit's own closes (caller left, fatal error, job shutdown callback) do not call "
        "AgentSession.shutdown()",
        "resilient_agent._livekit.shutdown",
        "livekit now closes the session through AgentSession.shutdown() on its own",
        "test_livekit_closes_on_its_own_without_shutdown",
    ),
    Reliance(
        "EndCallTool calls session.shutdown() from the done callback of the tool's speech, "
        "whose tool reply (the goodbye) is the same handle, and job_ctx.shutdown() on close",
        "resilient_agent._livekit.shutdown, resilient_agent._session.tools (toolsets)",
        "livekit changed how EndCallTool ends the call",
        "test_end_call_tool_hangs_up_from_its_speech_done_callback",
    ),
    Reliance(
        "AudioInput.__anext__(self) -> coroutine and AudioInput.on_detached(self): the methods "
        "the observed subclass of the session's audio input overrides",
        "resilient_agent._session.session_audio (observing the caller's audio in place)",
        "livekit changed AudioInput.__anext__ or on_detached",
        "test_intercepted_methods_keep_their_signatures[AudioInput.__class__]",
    ),
    Reliance(
        "rtc.AudioFrame._data is the buffer frame.data views (the frame's int16 samples)",
        "resilient_agent._session.loudness (the level of the caller's line, of the replies)",
        "livekit moved AudioFrame._data",
        "test_frame_buffer_is_where_compat_expects_it",
    ),
    Reliance(
        "AudioInput.__aiter__ returns the input itself, so the session's `async for` over "
        "session.input.audio calls the input's class's __anext__ for every frame",
        "resilient_agent._session.session_audio (observing the caller's audio in place)",
        "livekit no longer reads an audio input through its class's own __anext__",
        "test_an_audio_input_is_read_through_its_own_class",
    ),
    Reliance(
        "the AgentInput.audio setter calls on_detached() on the input it replaces, before it "
        "stores the new one",
        "resilient_agent._session.session_audio (following a replaced input)",
        "livekit no longer detaches the audio input it replaces",
        "test_replacing_the_audio_input_detaches_the_old_one",
    ),
    Reliance(
        "livekit.rtc._proto's handle_pb2.FfiOwnedHandle, participant_pb2.OwnedParticipant / "
        "ParticipantInfo and track_pb2.OwnedTrackPublication / TrackPublicationInfo build a "
        "participant and a publication on the invalid handle 0",
        "resilient_agent.testing.room (OfflineLocalParticipant)",
        "livekit moved the livekit.rtc._proto messages a participant or publication is built from",
        "test_offline_room_internals_are_where_compat_expects_them[rtc._proto]",
    ),
    Reliance(
        "Room._room_queue is the queue rtc.LocalParticipant(room_queue, owned_info) takes",
        "resilient_agent.testing.room (OfflineLocalParticipant)",
        "livekit moved Room._room_queue",
        "test_offline_room_internals_are_where_compat_expects_them[Room._room_queue]",
    ),
    Reliance(
        "Room._info.name is what room.name reads",
        "resilient_agent.testing.room (OfflineRoom)",
        "livekit moved Room._info",
        "test_offline_room_internals_are_where_compat_expects_them[Room._info]",
    ),
    Reliance(
        "Room._local_participant is the room's own participant, set on connect",
        "resilient_agent.testing.room (OfflineRoom)",
        "livekit moved Room._local_participant",
        "test_offline_room_internals_are_where_compat_expects_them[Room._local_participant]",
    ),
    Reliance(
        "TrackPublication._track is what publication.track reads, set by publish_track",
        "resilient_agent.testing.room (OfflineLocalParticipant.publish_track)",
        "livekit moved TrackPublication._track",
        "test_offline_room_internals_are_where_compat_expects_them[TrackPublication._track]",
    ),
    Reliance(
        "LocalParticipant._track_publications is the dict, by sid, publish_track and "
        "unpublish_track keep and participant.track_publications shows",
        "resilient_agent.testing.room (OfflineLocalParticipant)",
        "livekit moved LocalParticipant._track_publications",
        "test_offline_room_internals_are_where_compat_expects_them"
        "[LocalParticipant._track_publications]",
    ),
    Reliance(
        "RecorderIO._put(item) queues each captured frame with its channel and started_at: the "
        "lab moves the agent's played audio from its loop-time stamp to wall time",
        "resilient_agent.testing.audio_recording (the recording's agent channel, which the "
        "replay reads for a line the TTS returned as silence)",
        "livekit moved RecorderIO._put or its items' channel and started_at",
        "test_place_played_audio_is_where_compat_expects_it",
    ),
)
"""Every livekit method the library intercepts and every livekit behaviour it relies on."""
