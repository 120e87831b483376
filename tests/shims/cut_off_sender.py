"""Run inside a host namespace by tests/integration/test_send_cut_off.py: the Telegram sender,
built as workers/delivery/telegram.build builds it, sending reply N for each line N on stdin and
printing `sent N` or `failed N <error>`. argv: api_base, lease seconds (0: no socket options)."""

from __future__ import annotations

import sys
import time

from shared.pipeline.outbox import OutboxRow
from workers.delivery import sockets
from workers.delivery.progress import LocalProgress
from workers.delivery.ratelimit import LocalLimiter
from workers.delivery.telegram import TelegramSender

TOKEN = "424242424:AAFakeTokenForTheCutOffSender"
CHAT = "5100001"


def main() -> None:
    api_base, lease = sys.argv[1], float(sys.argv[2])
    sender = TelegramSender(
        token=TOKEN,
        api_base=api_base,
        limiter=LocalLimiter(),
        progress=LocalProgress(),
        socket_options=sockets.socket_options(lease) if lease else (),
    )
    for line in sys.stdin:
        n = int(line)
        row = OutboxRow(
            id=n,
            lane=f"telegram:{CHAT}",
            platform="telegram",
            chat_id=CHAT,
            text=f"reply {n}",
            status="pending",
            attempts=0,
            created_at=time.time(),
        )
        try:
            sender.send(row)
            print(f"sent {n}", flush=True)
        except Exception as exc:
            print(f"failed {n} {type(exc).__name__}", flush=True)


if __name__ == "__main__":
    main()
