"""The library in one session (internal): ``ResilientAgent``, the runtime and its parts.

The public names are re-exported by :mod:`resilient_agent`; import them from there.
"""
