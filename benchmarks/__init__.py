"""Benchmarks that print figures; run them with ``python -m benchmarks.<name>``."""
