"""Middleware plugins: third-party middleware found by entry point and loaded by name.

A distribution declares a plugin in the ``resilient_agent.middleware`` entry point group::

    [project.entry-points."resilient_agent.middleware"]
    my_guard = "pkg.mod:MyGuard"

and an app loads it by name, ``ResilientAgent(plugins=["my_guard"])``, or from the environment,
``RESILIENT_AGENT_PLUGINS=my_guard``. No plugin runs unless it is named: third-party code runs
inside live calls. Every failure raises :class:`~resilient_agent.PluginError` when
the agent is built (or when :func:`prewarm_plugins` runs), never during a call.

Resolved plugins are cached for the life of the process, so calling :func:`prewarm_plugins` from
the ``AgentServer`` setup (prewarm) function means no job pays the import cost.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from .chain import validate_middleware
from .errors import MiddlewareError, PluginError
from .hooks import API_VERSION, Middleware
from .log import get_logger
from .spec import MiddlewareSpec, build_middleware
from .version import __version__

__all__ = [
    "DISABLE_AUTOLOAD_ENV",
    "ENTRY_POINT_GROUP",
    "PLUGINS_ENV",
    "available_plugins",
    "clear_plugin_cache",
    "load_plugins",
    "prewarm_plugins",
]

ENTRY_POINT_GROUP = "resilient_agent.middleware"
"""The entry point group a distribution declares its middleware plugins in."""

PLUGINS_ENV = "RESILIENT_AGENT_PLUGINS"
"""Comma-separated plugin names every ``ResilientAgent`` loads after its ``plugins=`` names."""

DISABLE_AUTOLOAD_ENV = "RESILIENT_AGENT_DISABLE_PLUGIN_AUTOLOAD"
"""Set (to anything but ``0``, ``false``, ``no``, ``off`` or empty) to ignore ``PLUGINS_ENV``."""

_UNSET_VALUES = frozenset({"", "0", "false", "no", "off"})

logger = get_logger("plugins")


@dataclass(frozen=True)
class _Distribution:
    """Who declares an entry point, for error messages."""

    name: str | None
    label: str

    @classmethod
    def of(cls, entry_point: EntryPoint) -> _Distribution:
        dist = entry_point.dist
        if dist is None:
            return cls(None, "an unknown distribution")
        return cls(dist.name, f"{dist.name} {dist.version}")

    @property
    def display_name(self) -> str:
        return self.name or "the distribution that provides it"


@dataclass(frozen=True)
class _ResolvedPlugin:
    """A plugin whose entry point imported, resolved and passed every check."""

    name: str
    distribution: _Distribution
    entry: Middleware | MiddlewareSpec


# Both caches live for the process: entry point scans walk every installed distribution and
# plugin modules may be slow to import. No lock: two threads resolving the same name at once
# import the same module (the import system serializes that) and store equal results.
_installed_cache: dict[str, tuple[EntryPoint, ...]] | None = None
_resolved_cache: dict[str, _ResolvedPlugin] = {}


def clear_plugin_cache() -> None:
    """Forget every scanned entry point and resolved plugin (for tests, or after an install)."""
    global _installed_cache
    _installed_cache = None
    _resolved_cache.clear()


def available_plugins() -> dict[str, str]:
    """Every installed plugin name and the distribution (``"name version"``) that declares it.

    Nothing is imported: this reads package metadata only.
    """
    return {
        name: " and ".join(_Distribution.of(ep).label for ep in found)
        for name, found in sorted(_installed_entry_points().items())
    }


def load_plugins(names: Sequence[str]) -> list[Middleware | MiddlewareSpec]:
    """Fresh middleware for the named plugins, then for those in ``RESILIENT_AGENT_PLUGINS``.

    Called by ``ResilientAgent.__init__`` with its ``plugins=`` argument. Names are loaded in
    order; a name given twice (or both here and in the environment) loads once, at its first
    place. ``RESILIENT_AGENT_DISABLE_PLUGIN_AUTOLOAD=1`` ignores the environment, never
    ``names``.

    Args:
        names: Plugin (entry point) names, in chain order.

    Returns:
        One new, validated middleware instance per plugin, in order.

    Raises:
        PluginError: A plugin is unknown, does not import or resolve, is not a middleware, needs
            constructor options, fails validation, or was written for another API version.
    """
    loaded: list[Middleware | MiddlewareSpec] = []
    for name, named_in in _requested(names, explicit_source="plugins=[...]"):
        loaded.append(_build(_resolve(name, named_in), named_in))
    return loaded


def prewarm_plugins(names: Sequence[str] | None = None) -> list[str]:
    """Resolve, once per process, every plugin ``ResilientAgent(plugins=names)`` would load.

    Call it from the ``AgentServer`` setup (prewarm) function so each job process imports and
    checks its plugins before a job arrives, and a broken plugin fails the process at start::

        def prewarm(proc: JobProcess) -> None:
            prewarm_plugins(["my_guard"])

        server = AgentServer(setup_fnc=prewarm)

    Args:
        names: The names the agents pass as ``plugins=``; the environment's are added, as
            :func:`load_plugins` does. None prewarms the environment's only.

    Returns:
        The names resolved, in load order.

    Raises:
        PluginError: As :func:`load_plugins`.
    """
    requested = _requested(names or (), explicit_source="prewarm_plugins([...])")
    for name, named_in in requested:
        _resolve(name, named_in)
    return [name for name, _ in requested]


def _requested(names: Sequence[str], *, explicit_source: str) -> list[tuple[str, str]]:
    """``(name, where it was named)`` pairs: ``names`` then the environment's, each name once."""
    if isinstance(names, str):
        # a bare string is a Sequence[str] too, and would load one plugin per character
        raise PluginError(
            names,
            "plugin names must be a list, not a string",
            fix=f"write plugins=[{names!r}]",
        )
    requested: dict[str, str] = {}
    for name in names:
        if not isinstance(name, str):
            raise PluginError(
                repr(name),
                f"plugin names are strings, and this is a {type(name).__name__}",
                fix="pass middleware objects and specs in middleware=[...], and only plugin "
                "(entry point) names in plugins=[...]",
            )
        requested.setdefault(name, explicit_source)
    for name in _environment_names():
        requested.setdefault(name, PLUGINS_ENV)
    return list(requested.items())


def _environment_names() -> list[str]:
    raw = os.environ.get(PLUGINS_ENV, "")
    if not raw.strip():
        return []
    if os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip().lower() not in _UNSET_VALUES:
        logger.debug("plugin_autoload_disabled", kill_switch=DISABLE_AUTOLOAD_ENV, ignored=raw)
        return []
    return [name.strip() for name in raw.split(",") if name.strip()]


def _installed_entry_points(*, rescan: bool = False) -> dict[str, tuple[EntryPoint, ...]]:
    global _installed_cache
    if _installed_cache is None or rescan:
        found: dict[str, dict[str, EntryPoint]] = {}
        for entry_point in entry_points(group=ENTRY_POINT_GROUP):
            # keyed by distribution too: the same distribution seen twice on sys.path is one
            label = _Distribution.of(entry_point).label
            found.setdefault(entry_point.name, {}).setdefault(label, entry_point)
        _installed_cache = {name: tuple(by_dist.values()) for name, by_dist in found.items()}
    return _installed_cache


def _resolve(name: str, named_in: str) -> _ResolvedPlugin:
    """Find, import and check one plugin, or return it from the process cache."""
    cached = _resolved_cache.get(name)
    if cached is not None:
        return cached
    candidates = _installed_entry_points().get(name)
    if candidates is None:
        # installed after the first scan (a pip install in a running notebook): look once more
        candidates = _installed_entry_points(rescan=True).get(name)
    if candidates is None:
        raise _unknown_plugin(name, named_in)
    if len(candidates) > 1:
        providers = " and ".join(_Distribution.of(ep).label for ep in candidates)
        raise PluginError(
            name,
            f"{len(candidates)} distributions declare it ({providers})",
            fix="uninstall one of them, so the name means one middleware",
        )
    entry_point = candidates[0]
    distribution = _Distribution.of(entry_point)
    target = _load_entry_point(name, entry_point, distribution, named_in)
    entry = _as_middleware_entry(name, entry_point, target, distribution, named_in)
    resolved = _ResolvedPlugin(name, distribution, entry)
    # build one now, so a constructor or hook problem surfaces at prewarm, not in a job
    _build(resolved, named_in)
    _resolved_cache[name] = resolved
    logger.debug("plugin_resolved", plugin=name, distribution=distribution.label)
    return resolved


def _unknown_plugin(name: str, named_in: str) -> PluginError:
    available = sorted(_installed_entry_points())
    close = difflib.get_close_matches(name, available, n=1)
    suggestion = f"did you mean {close[0]!r}? Otherwise " if close else ""
    return PluginError(
        name,
        f"no installed distribution declares it in entry point group {ENTRY_POINT_GROUP!r} "
        f"(available plugins: {', '.join(available) if available else 'none are installed'})",
        fix=f"{suggestion}install the distribution that provides it into this environment, "
        f"or remove {name!r} from {named_in}",
    )


def _load_entry_point(
    name: str, entry_point: EntryPoint, distribution: _Distribution, named_in: str
) -> object:
    """Import the entry point's module and walk its attribute path."""
    reference = EntryPoint.pattern.match(entry_point.value)
    if reference is None:
        raise PluginError(
            name,
            f"its entry point value {entry_point.value!r} is not 'module:attribute'",
            fix=f"correct the entry point in {distribution.display_name}'s pyproject.toml, "
            f"or remove {name!r} from {named_in}",
            distribution=distribution.label,
        )
    module_name, attribute_path = reference.group("module"), reference.group("attr") or ""
    try:
        target: object = importlib.import_module(module_name)
    except Exception as exc:
        raise PluginError(
            name,
            f"its module {module_name!r} failed to import ({type(exc).__name__}: {exc})",
            fix=f"install what {distribution.display_name} needs or fix the error it raises "
            f"(the traceback is chained), or remove {name!r} from {named_in}",
            distribution=distribution.label,
        ) from exc
    for attribute in filter(None, attribute_path.split(".")):
        try:
            target = getattr(target, attribute)
        except AttributeError as exc:
            raise PluginError(
                name,
                f"its entry point {entry_point.value!r} does not resolve: "
                f"{module_name!r} has no attribute {attribute_path!r}",
                fix=f"reinstall {distribution.display_name} (its metadata may be stale) or "
                f"correct the entry point to name an existing object, "
                f"or remove {name!r} from {named_in}",
                distribution=distribution.label,
            ) from exc
    return target


def _as_middleware_entry(
    name: str,
    entry_point: EntryPoint,
    target: object,
    distribution: _Distribution,
    named_in: str,
) -> Middleware | MiddlewareSpec:
    """Accept a Middleware subclass (built with no options), instance, or MiddlewareSpec."""
    entry: Middleware | MiddlewareSpec
    if isinstance(target, type) and issubclass(target, Middleware):
        _check_api_version(name, target, distribution, named_in)
        try:
            inspect.signature(target).bind()
        except TypeError as exc:
            raise PluginError(
                name,
                f"{target.__qualname__} cannot be built with no options ({exc}); "
                "a plugin class is built as cls()",
                fix=f"give every parameter of {target.__qualname__}.__init__ a default, or point "
                f"the entry point at a MiddlewareSpec(cls, **options), or remove {name!r} from "
                f"{named_in}",
                distribution=distribution.label,
            ) from exc
        entry = MiddlewareSpec(target)
    elif isinstance(target, Middleware):
        _check_api_version(name, type(target), distribution, named_in)
        entry = target
    elif isinstance(target, MiddlewareSpec):
        _check_api_version(name, target.cls, distribution, named_in)
        entry = target
    else:
        raise PluginError(
            name,
            f"its entry point {entry_point.value!r} is {_describe(target)}, not a middleware",
            fix="point the entry point at a resilient_agent.Middleware subclass, a Middleware "
            f"instance or a MiddlewareSpec, or remove {name!r} from {named_in}",
            distribution=distribution.label,
        )
    return entry


def _check_api_version(
    name: str, cls: type[Middleware], distribution: _Distribution, named_in: str
) -> None:
    declared = cls.api_version
    if declared == API_VERSION:
        return
    if isinstance(declared, int) and declared > API_VERSION:
        fix = (
            f"upgrade resilient-agent to a release that implements middleware API {declared}, "
            f"or install a release of {distribution.display_name} written for API {API_VERSION}"
        )
    else:
        fix = (
            f"upgrade {distribution.display_name} to a release written for middleware API "
            f"{API_VERSION}, or remove {name!r} from {named_in}"
        )
    raise PluginError(
        name,
        f"{cls.__qualname__} was written for middleware API {declared!r}, "
        f"and resilient-agent {__version__} implements API {API_VERSION}",
        fix=fix,
        distribution=distribution.label,
    )


def _build(resolved: _ResolvedPlugin, named_in: str) -> Middleware:
    """A fresh, validated instance of a resolved plugin."""
    name, distribution = resolved.name, resolved.distribution
    try:
        instance = build_middleware(resolved.entry)
    except Exception as exc:
        raise PluginError(
            name,
            f"building {resolved.entry!r} raised {type(exc).__name__}: {exc}",
            fix=f"report it to the maintainers of {distribution.display_name}, "
            f"or remove {name!r} from {named_in}",
            distribution=distribution.label,
        ) from exc
    try:
        validate_middleware(instance)
    except MiddlewareError as exc:
        problem = str(exc).removesuffix(f". Fix: {exc.fix}")
        raise PluginError(
            name,
            f"it is not a valid middleware ({problem})",
            fix=f"{exc.fix} in {distribution.display_name}, or remove {name!r} from {named_in}",
            distribution=distribution.label,
        ) from exc
    return instance


def _describe(target: object) -> str:
    if isinstance(target, type):
        return f"the class {target.__module__}.{target.__qualname__}"
    text = repr(target)
    # a long repr (a module with its path, a big container) would bury the message
    shown = text if len(text) <= 60 else f"{text[:57]}..."
    return f"{shown} (of type {type(target).__name__})"
