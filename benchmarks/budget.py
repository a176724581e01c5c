"""How a benchmark judges a figure against its budget: at most the ceiling, or within the noise."""

from __future__ import annotations

__all__ = ["budget_verdict"]


def budget_verdict(figure: float, ceiling: float, noise: float, noise_text: str) -> str:
    """``holds``, ``holds within <noise_text>``, or ``EXCEEDED``.

    A figure above its ceiling by no more than ``noise`` (what a change that touches nothing
    moves it by) is not a regression to act on, and says so.
    """
    if figure <= ceiling:
        return "holds"
    if figure <= ceiling + noise:
        return f"holds within {noise_text}"
    return "EXCEEDED"
