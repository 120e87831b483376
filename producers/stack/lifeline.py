"""Children that die with the process that started them, however it dies.

`hermes up` and a terminal chat start Redis, workers, beat and receivers. On Ctrl-C they are
stopped in order; but a parent killed outright (`kill -9`, the OOM killer) used to leave them
running, and the next `hermes up` refused to start beside them. On Linux each child asks the
kernel for SIGTERM when its parent dies (PR_SET_PDEATHSIG), so they stop as they would on
Ctrl-C: Redis at once, workers after their running turns. Elsewhere nothing is done.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> Callable[[], None]:
    def preexec() -> None:  # runs in the child between fork and exec: nothing but syscalls
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)

    return preexec


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess.Popen: the child gets SIGTERM when this process dies."""
    if not sys.platform.startswith("linux"):
        return None
    return _die_with(os.getpid())
