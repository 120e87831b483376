"""Turn-pipeline benchmark on real processes: throughput against bare Celery, slow-model fan-out
and the embedded stack's hop latency. Progress goes to stderr; the last stdout line is JSON.

    python bench/pipeline.py            # full size (5,000 turns over 1,000 sessions, ...)
    python bench/pipeline.py --quick    # the same phases, smaller, within a minute

Everything runs in child processes this script starts and stops: a private `redis-server`
on a free port (phases 1-2), `hermes worker` processes (threads pool unless --pool; the
throughput phase runs on threads and on prefork, see --throughput-pools), and the
embedded Redis of producers/stack/embedded_redis.py (phase 3). Turns are produced here through
producers.intake.accept into a real state.db under a temporary HERMES_HOME, woken by the real
BrokerWaker. Timestamps all come from time.time() on this one machine:

- enqueue→start of a turn is inbox.received_at → inbox.started_at (both in state.db); of a bare
  task, the send time it carries → the time it starts (it RPUSHes both to a Redis list).
- a turn is *done* when its inbox row is finished; *delivered* when its outbox reply is sent.
  Throughput is counted to done (turns/s) and reported to delivered as well.
- streaming: time to first token on the terminal (its subscription to the turn's live channel)
  with a fake model streaming chunks 10 ms apart, beside the model's own first token
  (bench/streaming.py, which runs it alone with more options).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

# Run this checkout's code here and in every worker, whatever is installed.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.common import Children, run_in_work_dir, start_redis  # noqa: E402
from bench.pipeline_embedded import embedded_phase  # noqa: E402
from bench.pipeline_slow import slow_phase  # noqa: E402
from bench.pipeline_stack import Pool, Sizes  # noqa: E402
from bench.pipeline_throughput import best_of, throughput_phase, throughput_pools  # noqa: E402
from bench.streaming import streaming_phase  # noqa: E402
from shared.settings import load_settings  # noqa: E402

FULL = Sizes(
    sessions=1000, per_session=5, bare_tasks=5000, slow_sessions=200, slow_per_session=3, hops=200
)


QUICK = Sizes(
    sessions=300, per_session=1, bare_tasks=1000, slow_sessions=200, slow_per_session=2, hops=50
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, under a minute")
    parser.add_argument("--processes", type=int, help="worker processes (settings default)")
    parser.add_argument("--concurrency", type=int, help="threads per worker (settings default)")
    parser.add_argument(
        "--pool",
        default="threads",
        choices=["threads", "prefork", "solo"],
        help="worker pool for the slow and embedded phases (and that pool's throughput run)",
    )
    parser.add_argument(
        "--throughput-pools",
        default="threads,prefork",
        help="pools the zero-latency phase runs on, each against bare tasks on the same pool; "
        "the headline ratio is the best pipeline over the best bare run of any of them",
    )
    parser.add_argument(
        "--producers", type=int, default=4, help="threads accepting turns (and sending bare tasks)"
    )
    parser.add_argument("--latency-ms", type=float, default=2000, help="slow-model latency")
    parser.add_argument("--sessions", type=int, help="zero-latency sessions")
    parser.add_argument("--turns", type=int, help="zero-latency turns per session")
    parser.add_argument(
        "--phases",
        default="throughput,slow,embedded,streaming",
        help="comma list of throughput, slow, embedded, streaming",
    )
    parser.add_argument(
        "--stream-turns", type=int, help="streaming phase: turns (default 200, 20 with --quick)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL database (postgresql://…) to run on: each phase gets a fresh schema "
        "in it, dropped at the end (default: state.db in each phase's HERMES_HOME)",
    )
    return parser.parse_args(argv)


def run(args: argparse.Namespace, work: Path, children: Children) -> dict[str, Any]:
    sizes = QUICK if args.quick else FULL
    sessions = args.sessions or sizes.sessions
    per_session = args.turns or sizes.per_session
    defaults = load_settings({}).workers
    pool = Pool(
        processes=args.processes or defaults.processes,
        concurrency=args.concurrency or defaults.concurrency,
        kind=args.pool,
    )
    phases = set(args.phases.split(","))
    out: dict[str, Any] = {
        "bench": "pipeline",
        "quick": bool(args.quick),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "pool": {"processes": pool.processes, "concurrency": pool.concurrency, "kind": pool.kind},
        "producer_threads": args.producers,
        "database": "postgresql" if args.database_url else "sqlite",
    }
    broker = start_redis(children, work) if phases & {"throughput", "slow"} else ""
    if "throughput" in phases:
        pools = throughput_pools(args.throughput_pools, pool)
        runs = {}
        for each in pools:
            redis.Redis.from_url(broker).flushdb()
            runs[each.kind] = throughput_phase(
                children,
                work,
                broker,
                each,
                args.producers,
                sizes,
                sessions,
                per_session,
                args.database_url,
            )
        out.update(best_of(runs))
    if "slow" in phases:
        latency = args.latency_ms / 1000
        out["slow"] = slow_phase(
            children, work, broker, pool, args.producers, sizes, latency, args.database_url
        )
    if "embedded" in phases:
        out["embedded"] = embedded_phase(children, work, pool, sizes.hops, args.database_url)
    if "streaming" in phases:  # time to first token on the terminal, beside the model's own
        turns = args.stream_turns or (20 if args.quick else 200)
        out["streaming"] = streaming_phase(children, work, turns, 10.0, 0.0)
    out["targets"] = _targets(out)
    return out


def _targets(out: dict[str, Any]) -> dict[str, bool | None]:
    slow = out.get("slow", {})
    checked = [out.get("zero_latency"), slow.get("burst"), slow.get("conversation")]
    runs = [r for r in checked if r]
    if "embedded" in out:
        runs.append(out["embedded"])
    return {
        "ratio_ge_0_5": out["ratio"]["met"] if "ratio" in out else None,
        "slow_burst_le_1_5": slow["burst"]["met"] if slow else None,
        "slow_conversation_le_1_5": slow["conversation"]["met"] if slow else None,
        "order_ok": all(r["order_ok"] for r in runs) if runs else None,
        "exactly_once_ok": all(r["exactly_once_ok"] for r in runs if "exactly_once_ok" in r)
        if runs
        else None,
        "all_done": all(r["all_done"] for r in runs if "all_done" in r) if runs else None,
    }


def finite(value: Any) -> Any:
    """The result with NaN/inf (an unfinished run) as null, so the line stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    started = time.monotonic()
    out = run_in_work_dir(
        "hermes-bench-",
        args.database_url,
        lambda work, children: run(args, work, children),
        keep=args.keep,
    )
    if out is None:
        return 130
    out["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(finite(out), allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
