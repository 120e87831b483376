"""End to end, per platform: a payload in at `hermes gateway <platform>` (real HTTP or the fake
Discord gateway) → a real `hermes worker` on real Redis → the replies at the fake platform
server, in order, once each. Nothing here is eager or in-process: three real processes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from producers.slack.signature import sign
from tests.fakes.discord_api import FakeDiscord, text_channel
from tests.fakes.golden import load
from tests.fakes.server import free_port
from tests.fakes.slack_api import FakeSlack
from tests.fakes.stack import Proc, redis_db_url, start_gateway, start_worker, wait_for
from tests.fakes.telegram_api import FakeTelegram

pytestmark = pytest.mark.both_databases

# A bound, not a timing: a worker on a loaded machine with its store on PostgreSQL (a round trip
# per statement) once took longer than a minute to answer five turns. Under the tests' 180 s
# timeout, so a miss fails with the fleet's logs rather than a bare timeout.
REPLIES_WITHIN = 150

TG_TOKEN = "123456789:AAFakeTokenForTestsE2ESecret"
TG_SECRET = "webhook-secret-e2e"
SLACK_TOKEN = "xoxb-e2e-SlackBotTokenSecret"
SLACK_SECRET = "slack-signing-secret-e2e"
DISCORD_TOKEN = "OTAw.fake-discord-token.E2ESecret"
OFFLINE = "[offline model]"


@pytest.fixture
def fleet_env(hermes_env: dict[str, str], redis_url: str) -> dict[str, str]:
    port = free_port()
    return {
        **hermes_env,
        "HERMES_BROKER_URL": redis_db_url(redis_url),
        "HERMES_GATEWAY__PORT": str(port),
        "HERMES_PIPELINE__REDRIVE_SECONDS": "2",
    }


class Fleet:
    def __init__(self, env: dict[str, str], home: Path, platform: str) -> None:
        self.env, self.home, self.platform = env, home, platform
        self.procs: list[Proc] = []
        self.port = int(env["HERMES_GATEWAY__PORT"])

    def __enter__(self) -> Fleet:
        self.procs.append(start_worker(self.env, self.home))
        self.procs.append(start_gateway(self.env, self.home, self.platform, self.port))
        return self

    def __exit__(self, *exc: object) -> None:
        codes = [proc.stop() for proc in reversed(self.procs)]
        self.codes = codes

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def logs(self, chars: int = 6000) -> str:
        """The end of each process's log, the worker's first (the gateway's starts with the
        migrations' lines, which filled the whole of a shared tail)."""
        return "\n".join(
            f"--- hermes {' '.join(proc.args)} (last {chars} characters) ---\n"
            + proc.output()[-chars:]
            for proc in self.procs
        )

    def replies(self, check: Callable[[], object]) -> None:
        """Wait for the replies `check` looks for; on a miss, fail with the fleet's logs."""
        try:
            wait_for(check, timeout=REPLIES_WITHIN)
        except AssertionError:
            raise AssertionError(
                f"no replies within {REPLIES_WITHIN} s; the fleet's logs:\n{self.logs()}"
            ) from None


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram(TG_TOKEN) as fake:
        yield fake


def _update(number: int, text: str, message_id: int) -> dict[str, Any]:
    payload, _ = load("telegram", "private")
    update = json.loads(json.dumps(payload))
    update["update_id"] = number
    update["message"]["message_id"] = message_id
    update["message"]["text"] = text
    return dict(update)


@pytest.mark.timeout(180)
def test_telegram_webhook_to_worker_to_bot_api(
    fleet_env: dict[str, str], hermes_home: Path, telegram: FakeTelegram
) -> None:
    env = {
        **fleet_env,
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": TG_TOKEN,
        "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": TG_SECRET,
        "HERMES_PLATFORMS__TELEGRAM__API_BASE": telegram.api_base,
    }
    headers = {"X-Telegram-Bot-Api-Secret-Token": TG_SECRET}
    with Fleet(env, hermes_home, "telegram") as fleet:
        for n in range(3):
            response = httpx.post(
                fleet.url("/telegram/webhook"),
                json=_update(800 + n, f"turn {n}", 20 + n),
                headers=headers,
                timeout=10,
            )
            assert response.status_code == 200
        again = httpx.post(
            fleet.url("/telegram/webhook"),
            json=_update(801, "turn 1", 21),
            headers=headers,
            timeout=10,
        )
        assert again.status_code == 200  # a redelivery
        fleet.replies(lambda: len(telegram.sent("111111111")) >= 3)
        time.sleep(1.0)  # nothing more arrives
        logs = fleet.logs()
    texts = [p["text"] for p in telegram.sent("111111111")]
    assert texts == [
        f"{OFFLINE} I am the offline model (no model endpoint is configured), "
        f"so I can only echo: turn {n}"
        for n in range(3)
    ]
    assert fleet.codes == [0, 0], logs
    assert TG_TOKEN.split(":")[1] not in logs
    assert TG_SECRET not in logs


@pytest.mark.timeout(180)
def test_slack_events_to_worker_to_web_api(fleet_env: dict[str, str], hermes_home: Path) -> None:
    with FakeSlack(SLACK_TOKEN) as slack:
        env = {
            **fleet_env,
            "HERMES_PLATFORMS__SLACK__TOKEN": SLACK_TOKEN,
            "HERMES_PLATFORMS__SLACK__SIGNING_SECRET": SLACK_SECRET,
            "HERMES_PLATFORMS__SLACK__API_BASE": slack.api_base,
        }
        mention, _ = load("slack", "channel_app_mention")
        double, _ = load("slack", "channel_message_mention")
        thread, _ = load("slack", "thread")
        dms = []
        for n in range(3):
            dm = json.loads(json.dumps(load("slack", "dm")[0]))
            dm["event"]["ts"] = dm["event"]["event_ts"] = f"1767225600.{n:06d}"
            dm["event"]["text"] = f"dm {n}"
            dms.append(dm)
        with Fleet(env, hermes_home, "slack") as fleet:
            for payload in (mention, double, thread, *dms):
                body = json.dumps(payload).encode()
                stamp = str(int(time.time()))
                response = httpx.post(
                    fleet.url("/slack/events"),
                    content=body,
                    headers={
                        "Content-Type": "application/json",
                        "X-Slack-Request-Timestamp": stamp,
                        "X-Slack-Signature": sign(SLACK_SECRET, stamp, body),
                    },
                    timeout=10,
                )
                assert response.status_code == 200
            fleet.replies(lambda: len(slack.sent()) >= 5)
            time.sleep(1.0)
            logs = fleet.logs()
        sent = slack.sent()
    channel = sorted(
        (p.get("thread_ts") or "", p["text"].split("echo: ")[1])
        for p in sent
        if p["channel"] == "C0GENERAL"
    )
    assert channel == [
        ("", "summarise this channel"),
        ("1767225700.000200", "and the second point?"),
    ]
    in_dm = [p["text"].split("echo: ")[1] for p in sent if p["channel"] == "D0DMANN01"]
    assert in_dm == ["dm 0", "dm 1", "dm 2"]  # one session: in order, once each
    assert len(sent) == 5
    assert fleet.codes == [0, 0], logs
    assert SLACK_TOKEN not in logs and SLACK_SECRET not in logs


@pytest.mark.timeout(180)
def test_discord_gateway_to_worker_to_rest(fleet_env: dict[str, str], hermes_home: Path) -> None:
    with FakeDiscord(DISCORD_TOKEN) as discord:
        discord.channels["500000000000000001"] = text_channel(
            "500000000000000001", "700000000000000001"
        )
        env = {
            **fleet_env,
            "HERMES_PLATFORMS__DISCORD__TOKEN": DISCORD_TOKEN,
            "HERMES_PLATFORMS__DISCORD__API_BASE": discord.api_base,
        }
        with Fleet(env, hermes_home, "discord") as fleet:
            assert discord.identified.wait(30), fleet.logs()
            dm, _ = load("discord", "dm")
            guild, _ = load("discord", "guild_channel")
            for n in range(2):
                data = {**dm["dispatch"]["d"], "id": f"134000000000000000{n}", "content": f"dm {n}"}
                discord.dispatch("MESSAGE_CREATE", data)
            discord.dispatch("MESSAGE_CREATE", guild["dispatch"]["d"])
            fleet.replies(lambda: len(discord.sent()) >= 3)
            time.sleep(1.0)
            logs = fleet.logs()
        dms = [m["content"] for m in discord.sent("400000000000000001")]
        guilds = discord.sent("500000000000000001")
    assert [m.split("echo: ")[1] for m in dms] == ["dm 0", "dm 1"]
    assert len(guilds) == 1 and guilds[0]["content"].endswith("echo: what's the weather in Oslo?")
    assert guilds[0]["message_reference"]["message_id"] == "1320000000000000002"
    assert fleet.codes == [0, 0], logs
    assert DISCORD_TOKEN not in logs
