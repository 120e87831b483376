"""A prefork worker's scrape sums its children's metric files (prometheus_client's multiprocess
mode) and is not spoilt by a file a child has just created and not yet sized."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shared.metrics import exposition, registry, sized_files

CHILD = """
from prometheus_client import Counter
Counter("probe", "a child's count").inc(3)
"""


def _child_counts(directory: Path) -> None:
    """A real child process counting into `directory`, as a prefork child does."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    subprocess.run([sys.executable, "-c", CHILD], env=env, check=True)


def test_a_scrape_leaves_out_a_metric_file_not_yet_sized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _child_counts(tmp_path)
    (tmp_path / "counter_4242.db").touch()  # a child between creating its file and sizing it
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    body, _ = exposition(registry(None, store=None, clock=time.time, multiprocess=True))
    assert b"probe_total 3.0" in body


def test_sized_files_are_every_metric_file_with_bytes_in_it(tmp_path: Path) -> None:
    _child_counts(tmp_path)
    (tmp_path / "counter_4242.db").touch()
    (tmp_path / "notes.txt").write_text("not a metric file")
    found = [Path(path).name for path in sized_files(str(tmp_path))]
    assert len(found) == 1 and found[0].startswith("counter_")
    assert sized_files(str(tmp_path / "missing")) == []
