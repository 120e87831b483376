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
# The registered names as a set, computed once: every inbound turn is checked against it, and
# building it (entry points merged, sorted) cost more than the rest of the check. Reset by
# `register` and `unregister`.
_name_set: frozenset[str] | None = None


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


def name_set() -> frozenset[str]:
    """The registered platforms' names (cached until the registry changes)."""
    global _name_set
    found = _name_set
    if found is None:
        with _lock:
            found = _name_set = frozenset(platforms())
    return found


def get(name: str) -> Platform:
    try:
        return platforms()[name]
    except KeyError:
        known = ", ".join(names()) or "none"
        raise UnknownPlatform(f"unknown platform {name!r} (known: {known})") from None


def register(descriptor: Platform) -> None:
    """Add a platform in this process (a plug-in built at run time, a test's throwaway one)."""
    global _name_set
    with _lock:
        _added[descriptor.name] = descriptor
        _name_set = None


def unregister(name: str) -> None:
    global _name_set
    with _lock:
        _added.pop(name, None)
        _name_set = None
