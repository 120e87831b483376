"""Test-only: make the modules named in BLOCK_IMPORTS (comma list) fail to import.

Put this directory on PYTHONPATH of a subprocess to see how hermes behaves on a machine where a
platform SDK is not installed, without uninstalling it from the test venv.
"""

from __future__ import annotations

import os
import sys
from importlib.abc import MetaPathFinder

_BLOCKED = frozenset(
    name.strip() for name in os.environ.get("BLOCK_IMPORTS", "").split(",") if name
)


class _Blocker(MetaPathFinder):
    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname.split(".", 1)[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


if _BLOCKED:
    sys.meta_path.insert(0, _Blocker())
