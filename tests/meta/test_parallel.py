"""The parallel suite's isolation (tests/parallel.py): every xdist worker has a Redis and
PostgreSQL databases of its own, and its Redis goes when the worker does."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import REDIS_BASE_PORT, service_or_skip

ROOT = Path(__file__).resolve().parents[2]

# Run by the inner pytest on every worker (--dist each): where this worker's tests would go.
PROBE = """
import json, os
from pathlib import Path

from tests import conftest


def test_where(redis_url):
    out = Path(os.environ["PROBE_OUT"]) / (os.environ["PYTEST_XDIST_WORKER"] + ".json")
    out.write_text(json.dumps({"redis": redis_url, "postgres_db": conftest.POSTGRES_DB}))
"""


def test_each_worker_has_its_own_redis_and_databases_and_its_redis_stops_with_it(
    tmp_path: Path,
) -> None:
    service_or_skip("Redis", "127.0.0.1", REDIS_BASE_PORT)
    (tmp_path / "test_probe.py").write_text(PROBE)
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HERMES_"))}
    env["PROBE_OUT"] = str(out)
    argv = ["-p", "tests.conftest", "-n", "2", "--dist", "each", "-q", "--rootdir", str(ROOT)]
    argv += ["-c", str(ROOT / "pyproject.toml"), str(tmp_path / "test_probe.py")]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    seen = {path.stem: json.loads(path.read_text()) for path in out.glob("*.json")}
    assert set(seen) == {"gw0", "gw1"}
    ports = {
        worker: int(where["redis"].rsplit(":", 1)[1].split("/")[0])
        for worker, where in seen.items()
    }
    assert len(set(ports.values())) == 2 and 6379 not in ports.values(), ports
    assert {w["postgres_db"] for w in seen.values()} == {"test_gw0", "test_gw1"}
    for port in ports.values():  # each worker's redis-server stopped with it
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            continue
        raise AssertionError(f"a worker's redis-server still listens on {port}")
