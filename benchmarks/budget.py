"""How a benchmark judges a figure against its budget: at most the ceiling, or within the noise."""

from __future__ import annotations

__all__ = ["budget_verdict", "print_kb_budget"]


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


def print_kb_budget(held: str, added_kb: float, ceiling_kb: float, noise_kb: float) -> bool:
    """Print a memory budget's line, ``budget: the chain <held>``; False if it is exceeded.

    Args:
        held: What the chain holds, said before the ceiling ("adds 12.3 KB per lab session").
        added_kb: The figure held to the budget.
        ceiling_kb: The budget.
        noise_kb: What one run's noise moves the figure by.
    """
    verdict = budget_verdict(added_kb, ceiling_kb, noise_kb, f"one run's noise ({noise_kb:.0f} KB)")
    print(f"budget: the chain {held}, at most {ceiling_kb:.0f} KB: {verdict}")
    return verdict != "EXCEEDED"
