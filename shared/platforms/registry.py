"""The platform registry: the descriptors installed under the entry-point group
`hermes_fleet.platforms` (pyproject.toml), plus any `register`ed at run time (tests).

Loaded on first use, never at import; every list of platforms is derived from here.
"""

from __future__ import annotations

import threading
from importlib.metadata import entry_points

from shared.platforms.descriptor import Platform

GROUP = "hermes_fleet.platforms"

_lock = threading.RLock()
_installed: dict[str, Platform] | None = None
_added: dict[str, Platform] = {}


class UnknownPlatform(LookupError):
    """No platform of that name is registered."""


def _load_installed() -> dict[str, Platform]:
    found: dict[str, Platform] = {}
    for point in entry_points(group=GROUP):
        descriptor = point.load()
        if not isinstance(descriptor, Platform) or descriptor.name != point.name:
            raise TypeError(f"entry point {point.name} = {point.value} is not its Platform")
        found[point.name] = descriptor
    if not found:  # this distribution ships three: their absence is a stale install
        raise RuntimeError(
            f"no platforms are registered under the {GROUP!r} entry points: the installed "
            "metadata predates them; reinstall hermes-fleet (pip install -e .)"
        )
    return found


def _ordered(found: dict[str, Platform]) -> dict[str, Platform]:
    return dict(sorted(found.items(), key=lambda item: (item[1].order, item[0])))


def platforms() -> dict[str, Platform]:
    """Every registered platform by name, in their `order`."""
    global _installed
    with _lock:
        if _installed is None:
            _installed = _load_installed()
        return _ordered({**_installed, **_added})


def names() -> list[str]:
    return list(platforms())


def get(name: str) -> Platform:
    try:
        return platforms()[name]
    except KeyError:
        known = ", ".join(names()) or "none"
        raise UnknownPlatform(f"unknown platform {name!r} (known: {known})") from None


def register(descriptor: Platform) -> None:
    """Add a platform in this process (a plug-in built at run time, a test's throwaway one)."""
    with _lock:
        _added[descriptor.name] = descriptor


def unregister(name: str) -> None:
    with _lock:
        _added.pop(name, None)
