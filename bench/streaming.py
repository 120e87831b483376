"""Time to first token on the terminal: a streaming (fake) model behind real `hermes worker`
processes, the terminal's view taken as its Redis subscription to the turn's live channel.
Progress goes to stderr; the last stdout line is JSON.

    python bench/streaming.py             # 200 turns
    python bench/streaming.py --turns 30  # quicker

A private `redis-server` on a free port is the broker; the workers (threads pool) answer from
the fake OpenAI server of tests/fakes (SSE chunks, `--chunk-ms` apart). Per turn, all on
time.time() of this one machine:

- terminal_first_token_ms: accept (the terminal records the turn) → the first text event on
  the terminal's subscription, i.e. what `hermes` can draw first;
- model_first_token_ms: the model's own: request received → first text chunk sent;
- accept_to_model_first_token_ms: the pipeline before the model (wake, lease, prompt, request);
- model_to_terminal_ms: first chunk sent → first text event on the terminal (the live hop).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import Children, log, percentiles, start_redis  # noqa: E402
from bench.pipeline_stack import Pool, Stack, worker_env  # noqa: E402
from bench.pipeline_turns import make_turn  # noqa: E402
from producers.intake import accept  # noqa: E402
from shared.live import TEXT, channel_for, decode  # noqa: E402
from shared.pipeline import inbox  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, Step  # noqa: E402

MODEL = "bench-model"
WORDS = "streamed words arrive one chunk at a time " * 8


def measure(
    stack: Stack, fake: FakeOpenAI, turns: int, chunk_s: float, first_s: float
) -> dict[str, Any]:
    terminal, model, before, hop = [], [], [], []
    pubsub = stack.redis.pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe(channel_for(0).removesuffix("0") + "*")
    for n in range(turns):
        fake.script(
            Step(content=WORDS, chunk_size=8, chunk_delay=chunk_s, first_delay=first_s), model=MODEL
        )
        seen = len(fake.first_text)
        t0 = time.time()
        got = accept(
            stack.store,
            stack.waker,
            make_turn(f"s{n}", 0),
            settings=stack.settings,
            clock=time.time,
        )
        wanted = channel_for(got.turn_id)
        first = None
        deadline = time.monotonic() + 30
        while first is None and time.monotonic() < deadline:
            message = pubsub.get_message(timeout=1.0)
            if message is None or message["channel"].decode() != wanted:
                continue
            event = decode(message["data"])
            if event is not None and event.kind == TEXT and event.text:
                first = time.time()
        if first is None or len(fake.first_text) <= seen:
            with stack.store.read() as conn:
                row = inbox.get_turn(conn, got.turn_id)
            log(f"turn {got.turn_id}: {row}; chunks {len(fake.first_text)} vs {seen}")
            raise RuntimeError(f"no first token for turn {got.turn_id} within 30 s")
        received, sent = fake.first_text[seen]
        terminal.append(first - t0)
        model.append(sent - received)
        before.append(sent - t0)
        hop.append(first - sent)
        time.sleep(len(WORDS) / 8 * chunk_s + first_s + 0.1)  # let the turn finish: one at a time
    pubsub.close()
    return {
        "turns": turns,
        "terminal_first_token_ms": percentiles(terminal),
        "model_first_token_ms": percentiles(model),
        "accept_to_model_first_token_ms": percentiles(before),
        "model_to_terminal_ms": percentiles(hop),
    }


def streaming_phase(
    children: Children, work: Path, turns: int, chunk_ms: float, model_first_ms: float
) -> dict[str, Any]:
    """`turns` streamed turns, one at a time, through one real worker on a private Redis
    (also bench/pipeline.py's `streaming` phase)."""
    fake = FakeOpenAI()
    fake.start()
    stack: Stack | None = None
    try:
        broker = start_redis(children, work)
        home = work / "stream-home"
        home.mkdir()
        env = worker_env(home, broker, 0)
        env.update(
            {
                "HERMES_MODEL__BASE_URL": fake.url,
                "HERMES_MODEL__API_KEY": "sk-bench-not-secret",
                "HERMES_MODEL__NAME": MODEL,
                "HERMES_AUXILIARY__NAME": "bench-aux",
            }
        )
        stack = Stack(children, home, env, Pool(processes=1, concurrency=4, kind="threads"))
        log("starting a worker")
        stack.start_workers()
        log(f"{turns} streamed turns, one at a time")
        return {
            "chunk_ms": chunk_ms,
            "model_first_ms_set": model_first_ms,
            **measure(stack, fake, turns, chunk_ms / 1000, model_first_ms / 1000),
        }
    finally:
        if stack is not None:
            stack.close()
        fake.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 turns (well within a minute)")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--chunk-ms", type=float, default=10.0)
    parser.add_argument("--model-first-ms", type=float, default=0.0, help="model's own TTFT")
    args = parser.parse_args(argv)
    if args.quick:
        args.turns = min(args.turns, 20)
    work = Path(tempfile.mkdtemp(prefix="hermes-bench-stream-"))
    children = Children(work)
    try:
        out = {
            "bench": "streaming",
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load": os.getloadavg(),
            },
            **streaming_phase(children, work, args.turns, args.chunk_ms, args.model_first_ms),
        }
    finally:
        children.close()
        if os.environ.get("BENCH_KEEP") is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
