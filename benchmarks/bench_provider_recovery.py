"""What SttRecovery and LlmFallback cost on a healthy call: the 100-turn session with and without.

Both chains run the same 100-turn call in the same process, alternating, five times each; the
figure is the ratio of the best CPU times. Latencies must be identical (no fault, no action).
"""

from __future__ import annotations

import dataclasses
import time

from livekit.agents import Agent

from resilient_agent import ResilientAgent, default_middleware

from .bench_session import _scenario

_RECOVERY = ("SttRecovery", "LlmFallback")


def _without_recovery(base: type[Agent]) -> Agent:
    assert issubclass(base, ResilientAgent)
    chain = [m for m in default_middleware() if type(m).__name__ not in _RECOVERY]
    return base(instructions="You answer calls.", middleware=chain)


def _with_defaults(base: type[Agent]) -> Agent:
    return base(instructions="You answer calls.")


def main() -> None:
    """Print CPU seconds with and without the two middleware, their ratio, and the latencies."""
    from resilient_agent.testing import run_scenario

    cpu: dict[str, list[float]] = {"without": [], "with": []}
    latencies: dict[str, list[float | None]] = {}
    for _ in range(5):
        for label, factory in (("without", _without_recovery), ("with", _with_defaults)):
            scenario = dataclasses.replace(_scenario(), agent=factory)
            started = time.process_time()
            _, outcome = run_scenario(scenario, ResilientAgent)
            cpu[label].append(time.process_time() - started)
            assert outcome.passed, f"{label}: the 100-turn call failed"
            latencies[label] = outcome.reply_latencies_s
    base, full = min(cpu["without"]), min(cpu["with"])
    print(f"100-turn session CPU: without {base:.2f}s, with SttRecovery+LlmFallback {full:.2f}s")
    print(f"CPU ratio with/without: {full / base:.3f}")
    print(f"identical latencies for all turns: {latencies['with'] == latencies['without']}")


if __name__ == "__main__":
    main()
