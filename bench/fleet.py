"""Fleet scaling: turns/s with a slow model for 1, 2 and 4 worker processes on one store.

    python bench/fleet.py --database-url postgresql://…           # 1, 2, 4 workers, 2 s model
    python bench/fleet.py --database-url postgresql://… --quick   # 1, 2 workers, 4 threads, 0.5 s

Each step starts N `hermes worker` processes (threads pool, --threads each) on a fresh schema
of the database and a private redis-server, then enqueues N × threads × waves one-turn
sessions at once through producers.intake.accept. With the model taking --model-latency
seconds, N processes can at best finish N × threads turns per latency: that is the ideal, and
what a fleet should reach when the model, not our store, is the limit. Figures come from the
turns' own timestamps (first received → last done). Progress goes to stderr; stdout carries a
small chart and, last, one line of JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.common import Children, log, run_in_work_dir, start_redis  # noqa: E402
from bench.pipeline import finite  # noqa: E402
from bench.pipeline_stack import CpuMeter, Pool, Stack, worker_env  # noqa: E402
from bench.pipeline_turns import max_turn_id, produce, summarise, turn_times, wait_for  # noqa: E402

TARGET = 0.9  # of linear scaling
BAR = 40  # characters of the chart's longest bar
FULL = {"workers": "1,2,4", "threads": 16, "model_latency": 2.0, "waves": 5}
QUICK = {"workers": "1,2", "threads": 4, "model_latency": 0.5, "waves": 2}


def ideal_turns_per_s(workers: int, threads: int, latency: float) -> float:
    """Every thread of every worker busy with the model all the time."""
    return workers * threads / latency


def scaling(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each point with its efficiency (measured / ideal) and its scaling against linear from
    the smallest fleet measured ((turns/s at N) / (N / N0 × turns/s at N0))."""
    base = min(points, key=lambda p: p["workers"])
    out = []
    for p in points:
        linear = base["turns_per_s"] * p["workers"] / base["workers"]
        out.append(
            {
                **p,
                "efficiency": round(p["turns_per_s"] / p["ideal_turns_per_s"], 3),
                "vs_linear": round(p["turns_per_s"] / linear, 3) if linear else None,
            }
        )
    return out


def chart(points: list[dict[str, Any]]) -> str:
    """Turns/s per fleet size as bars, with the ideal marked `|` on each line."""
    top = max(max(p["turns_per_s"], p["ideal_turns_per_s"]) for p in points) or 1.0
    lines = [f"turns/s (█ measured, | ideal); target ≥ {TARGET} × linear"]
    for p in points:
        filled = round(BAR * p["turns_per_s"] / top)
        ideal = min(BAR - 1, round(BAR * p["ideal_turns_per_s"] / top) - 1)
        row = ["█"] * filled + [" "] * (BAR - filled)
        row[ideal] = "|"
        lines.append(
            f"{p['workers']:>2} worker{'s' if p['workers'] > 1 else ' '} {''.join(row)} "
            f"{p['turns_per_s']:7.1f} / {p['ideal_turns_per_s']:.1f}  ×{p['vs_linear']} linear"
        )
    return "\n".join(lines)


def step(
    children: Children, work: Path, broker: str, args: argparse.Namespace, workers: int
) -> dict[str, Any]:
    home = work / f"fleet{workers}"
    redis.Redis.from_url(broker).flushdb()
    env = worker_env(home, broker, args.model_latency * 1000, args.database_url)
    stack = Stack(children, home, env, Pool(workers, args.threads, "threads"), args.producers)
    try:
        log(f"{workers} worker(s) x {args.threads} threads: starting")
        stack.start_workers()
        sessions = workers * args.threads * args.waves
        after = max_turn_id(stack.store)
        meter = CpuMeter(stack)
        log(f"  {sessions} one-turn sessions at once")
        enqueue_s = produce(stack, f"f{workers}-{uuid.uuid4().hex[:6]}", sessions, 1)
        wait_for(stack.store, after, sessions, delivered=True, timeout=600)
        cpu = meter.per_item_ms(sessions)
        result = summarise(turn_times(stack.store, after), stack.store, after)
    finally:
        stack.close()
    ideal = ideal_turns_per_s(workers, args.threads, args.model_latency)
    log(f"  {result['turns_per_s']} turns/s (ideal {ideal:.1f})")
    return {
        "workers": workers,
        "turns_per_s": result["turns_per_s"] or 0.0,
        "ideal_turns_per_s": ideal,
        "turns": result["turns"],
        "elapsed_s": result["elapsed_s"],
        "enqueue_s": round(enqueue_s, 3),
        "enqueue_to_done_ms": result["enqueue_to_done_ms"],
        "cpu_ms_per_turn": cpu,
        "order_ok": result["order_ok"],
        "exactly_once_ok": result["exactly_once_ok"],
        "all_done": result["all_done"],
        "all_delivered": result["all_delivered"],
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL database (postgresql://…): each step gets a fresh schema in it, "
        "dropped at the end; without it each step's store is state.db (one host only)",
    )
    parser.add_argument("--quick", action="store_true", help=f"small: {QUICK}, under a minute")
    parser.add_argument("--workers", help=f"comma list of worker processes ({FULL['workers']})")
    parser.add_argument("--threads", type=int, help=f"threads per worker ({FULL['threads']})")
    parser.add_argument(
        "--model-latency", type=float, help=f"seconds per model call ({FULL['model_latency']})"
    )
    parser.add_argument("--waves", type=int, help=f"one-turn sessions per thread ({FULL['waves']})")
    parser.add_argument("--producers", type=int, default=8, help="threads accepting turns")
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    try:
        args.worker_counts = sorted({int(n) for n in args.workers.split(",")})
    except ValueError:
        parser.error(f"--workers takes numbers separated by commas, not {args.workers!r}")
    if not args.worker_counts or min(args.worker_counts) < 1:
        parser.error("--workers needs at least one count, each 1 or more")
    if args.database_url and not args.database_url.startswith("postgresql"):
        parser.error("--database-url must be a postgresql:// URL (a fleet's shared store)")
    if args.threads < 1 or args.waves < 1 or args.model_latency <= 0:
        parser.error("--threads and --waves must be 1 or more, --model-latency above 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    started = time.monotonic()

    def measure(work: Path, children: Children) -> list[dict[str, Any]]:
        broker = start_redis(children, work)
        return scaling([step(children, work, broker, args, n) for n in args.worker_counts])

    points = run_in_work_dir("hermes-fleet-bench-", args.database_url, measure)
    if points is None:
        return 130
    worst = min(p["vs_linear"] for p in points if p["vs_linear"] is not None)
    out = {
        "bench": "fleet",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "database": "postgresql" if args.database_url else "sqlite",
        "threads": args.threads,
        "model_latency_s": args.model_latency,
        "curve": points,
        "target": {"vs_linear": TARGET, "worst": worst, "met": worst >= TARGET},
        "wall_s": round(time.monotonic() - started, 1),
    }
    print(chart(points))
    print(json.dumps(finite(out), allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
