"""Middleware plugins: discovery by entry point, load order, environment, and every failure.

Each test installs throwaway distributions without pip: a ``*.dist-info`` folder (METADATA and
entry_points.txt) and a module written into ``tmp_path``, which goes first on ``sys.path``.
"""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from resilient_agent import Middleware, MiddlewareError, PluginError, ResilientAgent
from resilient_agent._engine.hooks import API_VERSION
from resilient_agent._engine.plugins import (
    DISABLE_AUTOLOAD_ENV,
    ENTRY_POINT_GROUP,
    PLUGINS_ENV,
    available_plugins,
    clear_plugin_cache,
    load_plugins,
    prewarm_plugins,
)

MODULE_PREFIX = "ra_test_plugin_"

GUARDS = """
    from resilient_agent import Middleware, MiddlewareSpec

    class AlphaGuard(Middleware):
        name = "alpha"

    class BetaGuard(Middleware):
        name = "beta"

    class Configurable(Middleware):
        name = "configurable"

        def __init__(self, *, level: int = 1) -> None:
            self.level = level

    SHARED = Configurable(level=2)
    SPEC = MiddlewareSpec(Configurable, level=3)
"""


class Site:
    """A folder on ``sys.path`` that throwaway distributions are installed into."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def install(
        self,
        distribution: str,
        entry_points: dict[str, str],
        *,
        version: str = "1.0.0",
        module: str | None = None,
        source: str = "",
    ) -> None:
        """Write ``distribution``'s metadata and, if given, one module ``MODULE_PREFIX+module``."""
        dist_info = self.root / f"{distribution.replace('-', '_')}-{version}.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
        )
        lines = [f"[{ENTRY_POINT_GROUP}]"]
        lines += [f"{name} = {value}" for name, value in entry_points.items()]
        (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        if module is not None:
            (self.root / f"{MODULE_PREFIX}{module}.py").write_text(textwrap.dedent(source))


def _forget_test_modules() -> None:
    for name in [m for m in sys.modules if m.startswith(MODULE_PREFIX)]:
        del sys.modules[name]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    monkeypatch.delenv(PLUGINS_ENV, raising=False)
    monkeypatch.delenv(DISABLE_AUTOLOAD_ENV, raising=False)
    monkeypatch.syspath_prepend(tmp_path)
    clear_plugin_cache()
    _forget_test_modules()
    yield Site(tmp_path)
    clear_plugin_cache()
    _forget_test_modules()


@pytest.fixture
def guards(site: Site) -> Site:
    """``acme-guards 1.2.0`` declaring alpha, beta and the three accepted kinds of object."""
    module = f"{MODULE_PREFIX}guards"
    site.install(
        "acme-guards",
        {
            "alpha": f"{module}:AlphaGuard",
            "beta": f"{module}:BetaGuard",
            "as_class": f"{module}:Configurable",
            "as_instance": f"{module}:SHARED",
            "as_spec": f"{module}:SPEC",
        },
        version="1.2.0",
        module="guards",
        source=GUARDS,
    )
    return site


class Local(Middleware):
    name = "local"


def agent(plugins: Any = (), middleware: list[Middleware] | None = None) -> ResilientAgent:
    return ResilientAgent(instructions="x", middleware=middleware or [], plugins=plugins)


def names(built: ResilientAgent) -> list[str]:
    return [mw.display_name for mw in built.middleware]


# -- loading -----------------------------------------------------------------------------------


def test_plugins_load_by_name_in_the_order_given_after_the_middleware(guards: Site) -> None:
    built = agent(["beta", "alpha"], middleware=[Local()])

    assert names(built) == ["local", "beta", "alpha"]
    assert [type(mw).__module__ for mw in built.middleware[1:]] == [f"{MODULE_PREFIX}guards"] * 2


def test_no_plugin_is_imported_unless_named(guards: Site) -> None:
    built = agent()

    assert names(built) == []
    assert f"{MODULE_PREFIX}guards" not in sys.modules
    assert "alpha" in available_plugins()  # installed, discoverable, and still not loaded
    assert f"{MODULE_PREFIX}guards" not in sys.modules


def test_a_class_an_instance_and_a_spec_are_all_accepted(guards: Site) -> None:
    built = agent(["as_class"])
    shared = agent(["as_instance"])
    spec = agent(["as_spec"])

    levels = [built.middleware[0], shared.middleware[0], spec.middleware[0]]
    assert [mw.level for mw in levels] == [1, 2, 3]  # type: ignore[attr-defined]


def test_each_agent_gets_its_own_instance_of_a_class_plugin(guards: Site) -> None:
    first, second = agent(["alpha"]), agent(["alpha"])

    assert type(first.middleware[0]) is type(second.middleware[0])
    assert first.middleware[0] is not second.middleware[0]


def test_a_name_given_twice_loads_once_at_its_first_place(guards: Site) -> None:
    assert names(agent(["alpha", "beta", "alpha"])) == ["alpha", "beta"]


def test_available_plugins_names_each_distribution(guards: Site) -> None:
    found = available_plugins()

    assert found["alpha"] == "acme-guards 1.2.0"
    assert found["beta"] == "acme-guards 1.2.0"


# -- environment -------------------------------------------------------------------------------


def test_environment_plugins_load_after_explicit_names_skipping_duplicates(
    guards: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PLUGINS_ENV, " beta, alpha ,,")

    assert names(agent()) == ["beta", "alpha"]
    assert names(agent(["alpha"])) == ["alpha", "beta"]


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_the_kill_switch_ignores_the_environment_but_not_explicit_names(
    guards: Site, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(PLUGINS_ENV, "alpha,not_installed")
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, value)

    assert names(agent()) == []
    assert names(agent(["beta"])) == ["beta"]
    assert f"{MODULE_PREFIX}guards" in sys.modules  # beta's module, imported by name


@pytest.mark.parametrize("value", ["0", "false", ""])
def test_a_kill_switch_set_to_off_leaves_the_environment_on(
    guards: Site, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(PLUGINS_ENV, "alpha")
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, value)

    assert names(agent()) == ["alpha"]


def test_an_unknown_name_in_the_environment_says_where_it_came_from(
    guards: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PLUGINS_ENV, "alpha,gamma")

    with pytest.raises(PluginError, match=f"remove 'gamma' from {PLUGINS_ENV}"):
        agent()


# -- failures, all at construction -------------------------------------------------------------


def test_an_unknown_name_lists_the_available_plugins(guards: Site) -> None:
    with pytest.raises(PluginError) as raised:
        agent(["alpah"])

    message = str(raised.value)
    assert message.startswith("plugin 'alpah': no installed distribution declares it")
    assert f"entry point group {ENTRY_POINT_GROUP!r}" in message
    assert "available plugins: alpha, as_class, as_instance, as_spec, beta" in message
    assert "did you mean 'alpha'?" in message
    assert "remove 'alpah' from plugins=[...]" in message
    assert isinstance(raised.value, MiddlewareError)
    assert (raised.value.plugin, raised.value.distribution) == ("alpah", None)


def test_a_module_that_fails_to_import_names_the_plugin_distribution_and_error(
    site: Site,
) -> None:
    site.install(
        "broken-guard",
        {"broken": f"{MODULE_PREFIX}broken:Guard"},
        version="0.3.1",
        module="broken",
        source="import numpyy_is_not_installed\n",
    )

    with pytest.raises(PluginError) as raised:
        agent(["broken"])

    message = str(raised.value)
    assert message.startswith("plugin 'broken' (from broken-guard 0.3.1): its module")
    assert "failed to import (ModuleNotFoundError: No module named 'numpyy_is_not_installed')" in (
        message
    )
    assert "install what broken-guard needs" in message
    assert isinstance(raised.value.__cause__, ModuleNotFoundError)
    assert raised.value.distribution == "broken-guard 0.3.1"


def test_a_module_that_raises_while_importing_is_reported_too(site: Site) -> None:
    site.install(
        "angry-guard",
        {"angry": f"{MODULE_PREFIX}angry:Guard"},
        module="angry",
        source="raise RuntimeError('needs ACME_API_KEY')\n",
    )

    with pytest.raises(PluginError, match=r"RuntimeError: needs ACME_API_KEY"):
        agent(["angry"])


def test_an_entry_point_attribute_that_does_not_exist(guards: Site) -> None:
    guards.install("stale-guard", {"stale": f"{MODULE_PREFIX}guards:GammaGuard"}, version="2.0")

    with pytest.raises(PluginError) as raised:
        agent(["stale"])

    message = str(raised.value)
    assert "plugin 'stale' (from stale-guard 2.0)" in message
    assert f"'{MODULE_PREFIX}guards' has no attribute 'GammaGuard'" in message
    assert "reinstall stale-guard" in message
    assert isinstance(raised.value.__cause__, AttributeError)


@pytest.mark.parametrize(
    ("attribute", "described"),
    [
        ("make_guard", "<function make_guard"),
        ("NotMiddleware", f"the class {MODULE_PREFIX}odd.NotMiddleware"),
        ("LEVEL", "3 (of type int)"),
    ],
)
def test_an_object_that_is_not_middleware(site: Site, attribute: str, described: str) -> None:
    site.install(
        "odd-guard",
        {"odd": f"{MODULE_PREFIX}odd:{attribute}"},
        module="odd",
        source="""
            LEVEL = 3

            def make_guard():
                return None

            class NotMiddleware:
                async def wrap_tool_call(self, ctx, call, call_next):
                    return await call_next(call)
        """,
    )

    with pytest.raises(PluginError) as raised:
        agent(["odd"])

    message = str(raised.value)
    assert "plugin 'odd' (from odd-guard 1.0.0)" in message
    assert described in message
    assert "not a middleware" in message
    assert "resilient_agent.Middleware subclass, a Middleware instance or a MiddlewareSpec" in (
        message
    )


@pytest.mark.parametrize(
    ("declared", "fix"),
    [
        (API_VERSION + 1, "upgrade resilient-agent to a release that implements middleware API"),
        (API_VERSION - 1, "upgrade future-guard to a release written for middleware API"),
    ],
)
def test_a_plugin_written_for_another_api_version(site: Site, declared: int, fix: str) -> None:
    site.install(
        "future-guard",
        {"future": f"{MODULE_PREFIX}future:Guard"},
        module="future",
        source=f"""
            from resilient_agent import Middleware

            class Guard(Middleware):
                api_version = {declared}
        """,
    )

    with pytest.raises(PluginError) as raised:
        agent(["future"])

    message = str(raised.value)
    assert "plugin 'future' (from future-guard 1.0.0)" in message
    assert f"written for middleware API {declared}" in message
    assert f"implements API {API_VERSION}" in message
    assert fix in message


def test_a_class_that_needs_options_is_refused(site: Site) -> None:
    site.install(
        "picky-guard",
        {"picky": f"{MODULE_PREFIX}picky:Guard"},
        module="picky",
        source="""
            from resilient_agent import Middleware

            class Guard(Middleware):
                def __init__(self, tools: list[str]) -> None:
                    self.tools = tools
        """,
    )

    with pytest.raises(PluginError, match=r"cannot be built with no options.*MiddlewareSpec"):
        agent(["picky"])


def test_an_invalid_hook_is_reported_as_the_plugin_s_fault(site: Site) -> None:
    site.install(
        "typo-guard",
        {"typo": f"{MODULE_PREFIX}typo:Guard"},
        module="typo",
        source="""
            from resilient_agent import Middleware

            class Guard(Middleware):
                async def on_tool_stat(self, ctx, call):
                    pass
        """,
    )

    with pytest.raises(PluginError) as raised:
        agent(["typo"])

    message = str(raised.value)
    assert "plugin 'typo' (from typo-guard 1.0.0)" in message
    assert "unknown hook 'on_tool_stat'" in message
    assert "rename it to 'on_tool_start' in typo-guard" in message


def test_a_name_two_distributions_declare_is_ambiguous(guards: Site) -> None:
    guards.install("other-guards", {"alpha": f"{MODULE_PREFIX}guards:BetaGuard"}, version="9.9")

    with pytest.raises(PluginError, match=r"2 distributions declare it \(.*acme-guards 1\.2\.0"):
        agent(["alpha"])
    with pytest.raises(PluginError, match=r"other-guards 9\.9"):
        agent(["alpha"])


def test_a_string_instead_of_a_list_of_names(guards: Site) -> None:
    with pytest.raises(PluginError, match=r"write plugins=\['alpha'\]"):
        agent("alpha")


def test_a_middleware_object_among_the_names(guards: Site) -> None:
    with pytest.raises(PluginError, match=r"plugin names are strings, and this is a Local"):
        agent(["alpha", Local()])


def test_a_plugin_named_like_an_explicit_middleware_is_a_duplicate(guards: Site) -> None:
    class Alpha(Middleware):
        name = "alpha"

    with pytest.raises(MiddlewareError, match="'alpha', name: appears twice"):
        agent(["alpha"], middleware=[Alpha()])


# -- caching and prewarm -----------------------------------------------------------------------


def test_prewarm_resolves_once_so_agents_never_import_again(guards: Site) -> None:
    assert prewarm_plugins(["beta", "alpha"]) == ["beta", "alpha"]
    assert f"{MODULE_PREFIX}guards" in sys.modules

    # the distribution and its module vanish: agents still build from the process cache
    (guards.root / f"{MODULE_PREFIX}guards.py").unlink()
    _forget_test_modules()
    assert names(agent(["alpha", "beta"])) == ["alpha", "beta"]
    assert f"{MODULE_PREFIX}guards" not in sys.modules

    clear_plugin_cache()
    with pytest.raises(PluginError, match="failed to import"):
        agent(["alpha"])


def test_prewarm_without_names_resolves_the_environment(
    guards: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert prewarm_plugins() == []
    assert f"{MODULE_PREFIX}guards" not in sys.modules

    monkeypatch.setenv(PLUGINS_ENV, "beta")
    assert prewarm_plugins() == ["beta"]
    assert prewarm_plugins(["alpha"]) == ["alpha", "beta"]
    assert f"{MODULE_PREFIX}guards" in sys.modules


def test_prewarm_fails_at_once_on_a_broken_plugin(guards: Site) -> None:
    with pytest.raises(PluginError, match=r"remove 'nope' from prewarm_plugins\(\[\.\.\.\]\)"):
        prewarm_plugins(["alpha", "nope"])


def test_a_distribution_installed_after_the_first_scan_is_found(guards: Site) -> None:
    assert names(agent(["alpha"])) == ["alpha"]  # scans and caches the installed entry points

    guards.install("late-guard", {"late": f"{MODULE_PREFIX}guards:BetaGuard"})

    assert names(agent(["late"])) == ["beta"]


def test_load_plugins_returns_fresh_validated_instances(guards: Site) -> None:
    first, second = load_plugins(["alpha"]), load_plugins(["alpha"])

    assert [type(mw).__name__ for mw in first] == ["AlphaGuard"]
    assert first[0] is not second[0]
    assert load_plugins([]) == []


# -- the example plugin in examples/resilient-agent-example-plugin -----------------------------


def test_the_example_plugin_loads_by_name(
    site: Site, example_plugin: importlib.metadata.Distribution
) -> None:
    example = example_plugin
    built = agent(["speaking_guard"], middleware=[Local()])

    guard = built.middleware[0]  # position = "first"
    assert type(guard).__qualname__ == "SpeakingGuard"
    assert type(guard).__module__ == "resilient_agent_example_plugin.guard"
    assert names(built) == ["speaking_guard", "local"]
    assert (
        available_plugins()["speaking_guard"] == f"resilient-agent-example-plugin {example.version}"
    )
