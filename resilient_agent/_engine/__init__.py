"""The middleware engine (internal): hooks, requests, decisions, the chain and its run.

Nothing here knows livekit's session beyond the types it passes on. The public names are
re-exported by :mod:`resilient_agent`; import them from there.
"""
