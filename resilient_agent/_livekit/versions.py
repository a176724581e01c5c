"""Which livekit-agents versions resilient-agent is tested against, and what to do outside them.

The range below is the one CI proves (the suite on the floor, pinned exactly, and on the newest
release below the ceiling); ``pyproject.toml``, the README, the docs and the template state the
same range, and ``tests/test_versions.py`` checks that they agree.

Outside the range the library still runs where it can: :func:`warn_if_untested_livekit` logs one
warning naming the installed version, and a missing optional livekit capability turns off only
the feature that needs it (:func:`has_capability`), reported once by name.
"""

from __future__ import annotations

import re
from importlib import metadata

from .._engine.log import get_logger
from .._engine.version import __version__

__all__ = [
    "TESTED_LIVEKIT_CEILING",
    "__version__",
    "TESTED_LIVEKIT_FLOOR",
    "TESTED_LIVEKIT_RANGE",
    "has_capability",
    "installed_livekit_version",
    "livekit_in_tested_range",
    "require_importable_livekit",
    "warn_if_untested_livekit",
]

TESTED_LIVEKIT_FLOOR = "1.8.0"
"""The oldest livekit-agents release the whole suite and the lab catalog pass on."""

TESTED_LIVEKIT_CEILING = "1.9"
"""The first minor release not tested yet (excluded): livekit's internals move every minor."""

TESTED_LIVEKIT_RANGE = f">={TESTED_LIVEKIT_FLOOR},<{TESTED_LIVEKIT_CEILING}"
"""The range as ``pyproject.toml`` declares it."""

logger = get_logger("versions")

# the installed version is read once per process (reading it parses the package's metadata file,
# which every agent constructed would otherwise pay for); livekit is imported already, so the
# version this process runs cannot change under it
_version_checked = False
_missing_reported: set[str] = set()


def _release(version: str) -> tuple[int, ...]:
    """The numeric release part of a version string (``1.8.0rc1`` -> ``(1, 8, 0)``)."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


def installed_livekit_version() -> str | None:
    """The installed livekit-agents version, or None when its metadata cannot be read."""
    try:
        return metadata.version("livekit-agents")
    except metadata.PackageNotFoundError:
        return None


def livekit_in_tested_range(version: str) -> bool:
    """Whether ``version`` lies in :data:`TESTED_LIVEKIT_RANGE`."""
    release = _release(version)
    return _release(TESTED_LIVEKIT_FLOOR) <= release < _release(TESTED_LIVEKIT_CEILING)


def require_importable_livekit() -> None:
    """Fail the import with the fix when livekit-agents is too old to import the library at all.

    livekit-agents 1.5 and older (1.3.10 included) lack ``llm.Tool`` or ``llm.ToolFlag``; the
    library's own imports would fail with a bare ``ImportError`` naming neither the cause nor
    the fix.

    Raises:
        ImportError: A name the library imports is missing from ``livekit.agents.llm``.
    """
    from livekit.agents import llm

    missing = [name for name in ("Tool", "Toolset", "ToolFlag") if not hasattr(llm, name)]
    if missing:
        raise ImportError(
            f"resilient-agent needs livekit-agents{TESTED_LIVEKIT_RANGE}; the installed "
            f"{installed_livekit_version()} has no livekit.agents.llm.{', llm.'.join(missing)}. "
            f'Upgrade: pip install "livekit-agents{TESTED_LIVEKIT_RANGE}" (docs/versions.md)'
        )


def warn_if_untested_livekit() -> bool:
    """Log once per process when the installed livekit-agents is outside the tested range.

    The version is read at the first call only.

    Returns:
        True if this call logged the warning.
    """
    global _version_checked
    if _version_checked:
        return False
    _version_checked = True
    version = installed_livekit_version()
    if version is None or livekit_in_tested_range(version):
        return False
    logger.warning(
        "livekit_version_untested",
        installed=version,
        tested=TESTED_LIVEKIT_RANGE,
        why="resilient-agent relies on livekit-agents behaviour that changes between releases",
        fix=f'install "livekit-agents{TESTED_LIVEKIT_RANGE}" (see docs/versions.md)',
    )
    return True


def has_capability(owner: object, attribute: str, *, feature: str, livekit_change: str) -> bool:
    """Whether ``owner`` has ``attribute``; if not, report once that ``feature`` is off.

    A feature that needs an optional livekit capability asks here first and sits the session
    out when it is missing, so the rest of the chain runs.

    Args:
        owner: The livekit object the feature uses.
        attribute: The public attribute it needs.
        feature: What is turned off without it, e.g. ``"Watchdog playout ledger"``.
        livekit_change: The livekit release that added (or removed) the attribute.

    Returns:
        True when the attribute is there.
    """
    if hasattr(owner, attribute):
        return True
    if feature not in _missing_reported:
        _missing_reported.add(feature)
        logger.warning(
            "livekit_capability_missing",
            feature=feature,
            missing=f"{type(owner).__name__}.{attribute}",
            livekit_change=livekit_change,
            installed=installed_livekit_version(),
            tested=TESTED_LIVEKIT_RANGE,
            effect=f"{feature} is off; everything else runs",
        )
    return False


# importing the library on a livekit-agents that lacks its names fails here, with the fix
require_importable_livekit()
