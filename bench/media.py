"""Media blobs: storing and reading N attachments in the database vs writing them to disk.

    python bench/media.py [--quick] [--count 1000] [--kb 200] [--database-url postgresql://…] [--s3]

Each blob is stored as a worker stores an attachment (`shared.store.media.put` with a session
reference, one write transaction each), then every one is read back by digest (one read
transaction each). The plain alternative is what hermes did before: `Path.write_bytes` of the
same bytes into one folder (no fsync, as before), then `read_bytes`. Random bytes, so nothing
compresses. SQLite always (state.db in a temporary HERMES_HOME); PostgreSQL too when
`--database-url` is given (a fresh schema in it, dropped after). `--s3` adds SQLite with
`media.url` set: the bytes go through boto3 to moto's server on 127.0.0.1 (in-memory, in this
process: it shows our overhead and the HTTP round trips, not a real bucket's latency). Human
lines to stdout, the last line one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import drop_bench_schemas, fresh_schema, log

SESSION = "20260101_000000_abcdef01"


def payloads(count: int, size: int) -> list[bytes]:
    return [os.urandom(size) for _ in range(count)]


def on_disk(blobs: list[bytes], folder: Path) -> dict[str, float]:
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for index, data in enumerate(blobs):
        (folder / f"{index + 1}-attachment.bin").write_bytes(data)
    wrote = time.perf_counter() - started
    started = time.perf_counter()
    total = sum(len((folder / f"{i + 1}-attachment.bin").read_bytes()) for i in range(len(blobs)))
    read = time.perf_counter() - started
    assert total == sum(map(len, blobs))
    return {"write_s": wrote, "read_s": read}


def in_store(blobs: list[bytes], url: str, objects: Any = None) -> dict[str, float]:
    from shared.db import open_store
    from shared.store import media

    store = open_store(url)
    try:
        cap = max(map(len, blobs))
        digests = []
        started = time.perf_counter()
        for data in blobs:
            with store.write() as conn:
                digests.append(media.put(conn, data, "application/octet-stream", max_bytes=cap,
                                         session_id=SESSION, objects=objects))  # fmt: skip
        wrote = time.perf_counter() - started
        started = time.perf_counter()
        total = 0
        for sha in digests:
            with store.read() as conn:
                found = media.read(conn, sha, objects)
            assert found is not None
            total += found.size
        read = time.perf_counter() - started
        assert total == sum(map(len, blobs))
        return {"write_s": wrote, "read_s": read}
    finally:
        store.close()


def in_moto(blobs: list[bytes], url: str) -> dict[str, float]:
    """The same, with the bytes in a bucket of moto's server (media.url)."""
    import boto3
    from moto.server import ThreadedMotoServer

    from shared.media_objects import from_settings
    from shared.sections import MediaSettings

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        creds = {"access_key_id": "bench", "secret_access_key": "bench", "region": "us-east-1"}
        boto3.session.Session().client(
            "s3", endpoint_url=endpoint, region_name="us-east-1",
            aws_access_key_id="bench", aws_secret_access_key="bench",
        ).create_bucket(Bucket="bench")  # fmt: skip
        media = MediaSettings.model_validate(
            {"url": "s3://bench/media", "endpoint_url": endpoint, **creds}
        )
        return in_store(blobs, url, from_settings(media))
    finally:
        server.stop()


def figures(
    name: str, timed: dict[str, float], plain: dict[str, float], mb: float, n: int
) -> dict[str, Any]:
    row = {
        "store": name,
        "write_s": round(timed["write_s"], 3),
        "read_s": round(timed["read_s"], 3),
        "write_mb_s": round(mb / timed["write_s"], 1),
        "read_mb_s": round(mb / timed["read_s"], 1),
        "write_per_s": round(n / timed["write_s"], 1),
        "read_per_s": round(n / timed["read_s"], 1),
        "write_x_disk": round(timed["write_s"] / plain["write_s"], 2),
        "read_x_disk": round(timed["read_s"] / plain["read_s"], 2),
    }
    print(
        f"{name:>10}: write {row['write_mb_s']:>7} MB/s ({row['write_per_s']}/s, "
        f"{row['write_x_disk']}x disk's time), read {row['read_mb_s']:>7} MB/s "
        f"({row['read_per_s']}/s, {row['read_x_disk']}x disk's time)",
        flush=True,
    )
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--kb", type=int, default=200)
    parser.add_argument("--database-url", help="also time PostgreSQL (postgresql://…)")
    parser.add_argument("--quick", action="store_true", help="100 blobs (a few seconds)")
    parser.add_argument("--s3", action="store_true", help="also SQLite + moto's S3 server")
    args = parser.parse_args(argv)
    if args.quick:
        args.count = min(args.count, 100)
    blobs = payloads(args.count, args.kb * 1000)
    mb = args.count * args.kb * 1000 / 1e6
    print(f"{args.count} blobs x {args.kb} KB = {mb:.0f} MB", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="hermes-bench-media-") as tmp:
        log("disk")
        plain = on_disk(blobs, Path(tmp) / "media")
        rows.append(figures("disk", plain, plain, mb, args.count))
        log("sqlite")
        sqlite = in_store(blobs, f"sqlite:///{tmp}/home/state.db")
        rows.append(figures("sqlite", sqlite, plain, mb, args.count))
        if args.s3:
            log("sqlite+s3")
            s3 = in_moto(blobs, f"sqlite:///{tmp}/s3home/state.db")
            rows.append(figures("sqlite+s3", s3, plain, mb, args.count))
        if args.database_url:
            log("postgresql")
            try:
                url = fresh_schema(args.database_url, "media")
                assert url is not None
                rows.append(figures("postgresql", in_store(blobs, url), plain, mb, args.count))
            finally:
                drop_bench_schemas(args.database_url)
    print(json.dumps({"count": args.count, "kb": args.kb, "results": rows}))


if __name__ == "__main__":
    main()
