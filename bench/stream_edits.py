"""Progressive replies on Telegram (`stream_edits`) against the plain reply: when the user first
sees text, and what it costs in Bot API calls. Progress goes to stderr; the last stdout line is
JSON.

    python bench/stream_edits.py              # 10 turns each way
    python bench/stream_edits.py --quick      # 4 turns each way

In-process: a private redis-server, the real drain and agent against the fake OpenAI server
(SSE chunks `--chunk-ms` apart, `--first-ms` of "thinking"), the real Telegram sender
(python-telegram-bot) against the fake Bot API, SQLite in a temporary HERMES_HOME. Per turn,
on time.time() of this machine:

- first_text_ms: accept → the first sendMessage the fake accepted (what the chat first shows);
- final_text_ms: accept → the chat shows the whole committed reply;
- api_calls: sendMessage + editMessageText calls per turn (the fleet's rate limits pay these).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import Children, log, percentiles, start_redis  # noqa: E402
from producers.intake import accept  # noqa: E402
from shared.db import open_store  # noqa: E402
from shared.settings import load_settings  # noqa: E402
from tests.fakes.delivery import delivery_runtime  # noqa: E402
from tests.fakes.openai_server import Step, running  # noqa: E402
from tests.fakes.telegram_api import FakeTelegram  # noqa: E402
from tests.pipeline_helpers import turn  # noqa: E402
from workers.agent.factory import build_agent  # noqa: E402
from workers.drain import drain  # noqa: E402
from workers.flush import flush  # noqa: E402

TOKEN = "123456789:AAFakeTokenForBenchSecretPart"
REPLY = (
    "Streamed words arrive one chunk at a time, and the chat shows them as they come. " * 3
).strip()


def run(
    home: Path, redis_url: str, turns: int, edits: bool, chunk_s: float, first_s: float
) -> dict[str, Any]:
    first, final, calls = [], [], []
    with running() as model, FakeTelegram(TOKEN) as bot:
        settings = load_settings(
            {
                "HERMES_HOME": str(home),
                "HERMES_BROKER_URL": redis_url,
                "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
                "HERMES_PLATFORMS__TELEGRAM__API_BASE": bot.api_base,
                "HERMES_PLATFORMS__TELEGRAM__STREAM_EDITS": str(edits).lower(),
                "HERMES_MODEL__BASE_URL": model.url,
                "HERMES_MODEL__API_KEY": "sk-bench-not-secret",
                "HERMES_MODEL__NAME": "bench-model",
                "HERMES_AUXILIARY__NAME": "aux-model",
            }
        )
        store = open_store(settings.resolved_database_url)
        agent = build_agent(settings, store)
        try:
            with delivery_runtime(settings, store) as (rt, _):
                rt = dataclasses.replace(rt, agent=agent)
                for n in range(turns):
                    chat = str(7000 + n + (500 if edits else 0))
                    model.script(
                        Step(content=REPLY, chunk_size=8, chunk_delay=chunk_s, first_delay=first_s),
                        model="bench-model",
                    )
                    before = len(bot.calls)
                    t0 = time.time()
                    got = accept(store, rt.waker, turn(n, chat, platform="telegram", text="hi"),
                                 settings=settings, clock=time.time)  # fmt: skip
                    drain(rt, got.session_key)
                    while flush(rt, f"telegram:{chat}").reason != "idle":
                        time.sleep(0.05)
                    mine = [c for c in bot.calls[before:] if str(c.params.get("chat_id")) == chat]
                    posts = [c for c in mine if c.method == "sendMessage" and c.params.get("_ok")]
                    changes = [c for c in bot.edits if str(c.params.get("chat_id")) == chat]
                    last = max([c.at for c in posts] + [c.at for c in changes])
                    assert bot.shown(chat) == [REPLY], bot.shown(chat)
                    first.append(posts[0].at - t0)
                    final.append(last - t0)
                    calls.append(len(posts) + len(changes))
                    log(f"{'edits' if edits else 'plain'} turn {n}: first {first[-1]:.2f} s")
        finally:
            agent.close()  # type: ignore[attr-defined]
            store.close()
    return {
        "first_text_ms": percentiles(first),
        "final_text_ms": percentiles(final),
        "api_calls_per_turn": {"min": min(calls), "max": max(calls)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="4 turns each way")
    parser.add_argument("--chunk-ms", type=float, default=100.0)
    parser.add_argument("--first-ms", type=float, default=500.0)
    args = parser.parse_args()
    if args.quick:
        args.turns = 4
    chunk_s, first_s = args.chunk_ms / 1000, args.first_ms / 1000
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as work:
        children = Children(Path(work))
        try:
            redis_url = start_redis(children, Path(work))
            results = {}
            for edits in (False, True):
                home = Path(work) / ("edits" if edits else "plain")
                home.mkdir()
                results["stream_edits" if edits else "plain"] = run(
                    home, redis_url, args.turns, edits, chunk_s, first_s
                )
        finally:
            children.close()
    writing = len(REPLY) / 8 * chunk_s + first_s
    plain, streamed = results["plain"], results["stream_edits"]
    ratio = None
    if plain["first_text_ms"]["p50"] and streamed["first_text_ms"]["p50"]:
        ratio = round(plain["first_text_ms"]["p50"] / streamed["first_text_ms"]["p50"], 2)
    print(json.dumps({"turns": args.turns, "model_writing_s": round(writing, 2),
                      "first_text_p50_plain_over_edits": ratio, **results}))  # fmt: skip


if __name__ == "__main__":
    main()
