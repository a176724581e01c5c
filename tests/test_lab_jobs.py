"""``--jobs`` judges calls in worker processes on every class the lab can build.

An app's own class whose constructor takes no ``instructions=`` runs on an adapter subclass the
lab builds; a worker process cannot be sent that class by reference, so the lab sends the agent
as its ``module:Class`` path and the worker builds the adapter again. Run as the command runs,
in a process of its own from the app's directory.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

from resilient_agent.lab.app_agent import catalog_base
from resilient_agent.lab.run import AgentUnderTest

ROOT = Path(__file__).resolve().parents[1]
SHOP = ROOT / "examples" / "own-tools"

_PIZZA = textwrap.dedent(
    '''
    from livekit.agents import RunContext, function_tool

    from resilient_agent import ResilientAgent


    class PizzaAgent(ResilientAgent):
        def __init__(self) -> None:
            super().__init__(instructions="Take pizza orders.")

        @function_tool
        async def text_confirmation(self, context: RunContext, phone_number: str) -> str:
            """Text the caller their order.

            Args:
                phone_number: Where to.
            """
            raise RuntimeError("a real outbound request")
    '''
)


def _lab(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "resilient_agent", "lab", "--quiet", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _passes(run: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in run.stderr, run.stderr
    assert run.returncode == 0, run.stdout + run.stderr


def test_an_adapted_app_class_travels_to_a_worker_as_its_path() -> None:
    sys.path.insert(0, str(SHOP))
    try:
        import shop

        agent = AgentUnderTest("shop:Shop", shop.Shop, catalog_cls=catalog_base(shop.Shop).cls)
        copy = pickle.loads(pickle.dumps(agent))
    finally:
        sys.path.remove(str(SHOP))

    assert copy.path == "shop:Shop" and copy.cls is shop.Shop
    assert copy.catalog_cls is not None and copy.catalog_cls is not shop.Shop
    assert issubclass(copy.catalog_cls, shop.Shop) and not copy.reference


def test_fuzz_with_jobs_runs_on_the_example_app_with_its_mocks() -> None:
    # seed 0 draws calls 0 and 5 of 6 from the generator: they go to the workers
    _passes(_lab(SHOP, "--agent", "shop:Shop", "--mock", "mocks.py", "--fuzz", "6", "--jobs", "2"))


def test_explore_with_jobs_runs_on_an_app_in_src_with_and_without_mocks(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "pizza.py").write_text(_PIZZA)
    (tmp_path / "mocks.py").write_text("MOCKS = {'text_confirmation': lambda **_: 'sent'}\n")
    only = ["--only", "^tool_gap/|app_tool/text_confirmation/during"]

    _passes(_lab(tmp_path, "--agent", "pizza:PizzaAgent", "--explore", "1", "--jobs", "2", *only))
    mocked = ["--agent", "pizza:PizzaAgent", "--mock", "mocks.py"]
    _passes(_lab(tmp_path, *mocked, "--explore", "1", "--jobs", "2", *only))
    _passes(_lab(tmp_path, *mocked, "--fuzz", "6", "--jobs", "2"))
