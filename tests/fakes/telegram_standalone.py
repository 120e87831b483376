"""The fake Telegram Bot API as a program, for trying a real install by hand.

    python -m tests.fakes.telegram_standalone --port 18081 --token 123:ABC --text "hello"

Serves the Bot API at http://127.0.0.1:PORT/bot (point `platforms.telegram.api_base` there),
offers one private message from a user to getUpdates, prints every Bot API call as it comes,
and exits 0 once the bot has answered with sendMessage (after --linger seconds more), or 1 if
no answer came within --timeout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from tests.fakes.server import Served
from tests.fakes.telegram_api import FakeTelegram


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--text", default="hello from Telegram")
    parser.add_argument("--chat", type=int, default=111111111)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument(
        "--linger", type=float, default=0, help="keep serving this long after the reply"
    )
    args = parser.parse_args()

    fake = FakeTelegram(args.token)
    fake.served = Served(fake.app(), port=args.port)
    fake.served.start()
    print(f"fake Bot API on {fake.api_base}", flush=True)
    user = {"id": args.chat, "is_bot": False, "first_name": "Ann", "username": "ann"}
    fake.add_update(
        {
            "update_id": 700000001,
            "message": {
                "message_id": 15,
                "from": user,
                "chat": {"id": args.chat, "first_name": "Ann", "type": "private"},
                "date": int(time.time()),
                "text": args.text,
            },
        }
    )
    print(f"queued for getUpdates: {args.text!r} from chat {args.chat}", flush=True)
    seen = 0
    deadline = time.monotonic() + args.timeout
    try:
        while time.monotonic() < deadline:
            calls = list(fake.calls)
            for call in calls[seen:]:
                shown = {k: v for k, v in call.params.items() if not k.startswith("_")}
                print(f"bot called {call.method} {json.dumps(shown)[:200]}", flush=True)
            seen = len(calls)
            sent = fake.sent(str(args.chat))
            if sent:
                print(f"REPLY ARRIVED in chat {args.chat}: {sent[0]['text']}", flush=True)
                time.sleep(args.linger)  # the bot keeps polling; let it stop first
                return 0
            time.sleep(0.1)
        print("no reply arrived", flush=True)
        return 1
    finally:
        fake.served.stop()


if __name__ == "__main__":
    sys.exit(main())
