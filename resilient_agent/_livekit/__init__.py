"""Every place livekit's own behaviour is replaced or read (internal).

Each method the library shadows is listed in :data:`.interception.INTERCEPTIONS` and installed
through an :class:`.interception.Interceptor`; every private livekit name the library reads
lives in :mod:`.compat`, pinned by a tripwire test; :mod:`.versions` holds the tested range.
"""
