"""A deliberately broken worker for the chaos test's self-check: it drains without a lease.

It takes every session key's "lease" even when another worker holds it and never checks the
fence. The chaos checker must catch what that does (turns run twice, out of order).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared.pipeline import leases, routes


def _grab(conn, key, holder, now, ttl):  # type: ignore[no-untyped-def]
    return leases.Lease(key, holder, 0)


def _ignore(*_args, **_kwargs):  # type: ignore[no-untyped-def]
    return None


routes.acquire_route = _grab
routes.check_route = _ignore
routes.release_route = _ignore

if __name__ == "__main__":
    from producers.cli.main import main

    sys.argv = ["hermes", *sys.argv[1:]]
    main()
