"""Files older versions saved under `$HERMES_HOME/media/<session id>/`: removed with their session.

Before attachments lived in the database (shared.store.media), a worker saved some of them under
its own HERMES_HOME and the transcript named that path. Such files stay readable on the host
that has them, and the transcripts that name them are left as written. When their session is
deleted or pruned, `remove` takes the session's folder on the host doing it; other hosts keep
theirs (nothing else knows of them), so a fleet that ran an older version prunes on each host
or removes `media/` by hand.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from shared.ids import is_safe_session_id


def remove(media_dir: Path, session_ids: Iterable[str]) -> int:
    """Remove the folders of these (deleted) sessions under `media_dir`; how many went."""
    if not media_dir.is_dir() or media_dir.is_symlink():
        return 0
    removed = 0
    for session_id in session_ids:
        if not is_safe_session_id(session_id):  # never a path out of media/
            continue
        folder = media_dir / session_id
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed
