"""Replay a real call from livekit's session report (``resilient-agent replay``)."""
