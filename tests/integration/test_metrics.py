"""Prometheus metrics scraped from a running `hermes gateway` and `hermes worker` (real processes,
real Redis, real HTTP), changing as turns flow; a prefork worker sums its children's counts."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.golden import load
from tests.fakes.server import free_port
from tests.fakes.stack import Proc, redis_db_url, start_gateway, wait_for
from tests.fakes.telegram_api import FakeTelegram

TG_TOKEN = "123456789:AAFakeTokenForMetricsTestsSecret"
TG_SECRET = "webhook-secret-metrics"
CHAT = "111111111"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a /metrics page: (name, sorted labels) → value."""
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _update(number: int, text: str) -> dict[str, Any]:
    payload, _ = load("telegram", "private")
    update = json.loads(json.dumps(payload))
    update["update_id"] = number
    update["message"]["message_id"] = 50 + number
    update["message"]["text"] = text
    return dict(update)


@pytest.fixture
def env(hermes_env: dict[str, str], redis_url: str) -> dict[str, str]:
    return {
        **hermes_env,
        "HERMES_BROKER_URL": redis_db_url(redis_url),
        "HERMES_GATEWAY__PORT": str(free_port()),
        "HERMES_PIPELINE__REDRIVE_SECONDS": "2",
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": TG_TOKEN,
        "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": TG_SECRET,
    }


def _post(port: int, number: int, text: str) -> None:
    response = httpx.post(
        f"http://127.0.0.1:{port}/telegram/webhook",
        json=_update(number, text),
        headers={"X-Telegram-Bot-Api-Secret-Token": TG_SECRET},
        timeout=10,
    )
    assert response.status_code == 200


def _worker(env: dict[str, str], home: Path, port: int, *pool: str) -> Proc:
    proc = Proc(
        env, home / "worker.log", "worker", "-c", "2", "-l", "INFO", "-n", "metrics@%h",
        "--metrics-port", str(port), *pool,
    )  # fmt: skip

    def up() -> bool:
        if proc.proc.poll() is not None:
            raise AssertionError(f"worker exited: {proc.output()}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, timeout=60)
    return proc


@pytest.mark.timeout(180)
def test_receiver_and_worker_metrics_change_as_turns_flow(
    env: dict[str, str], hermes_home: Path
) -> None:
    gateway_port = int(env["HERMES_GATEWAY__PORT"])
    worker_port = free_port()
    gateway_url = f"http://127.0.0.1:{gateway_port}/metrics"
    worker_url = f"http://127.0.0.1:{worker_port}/metrics"
    with FakeTelegram(TG_TOKEN) as telegram:
        env = {**env, "HERMES_PLATFORMS__TELEGRAM__API_BASE": telegram.api_base}
        procs = [start_gateway(env, hermes_home, "telegram", gateway_port)]
        try:
            before = scrape(gateway_url)
            assert value(before, "hermes_turns_accepted_total", platform="telegram") == 0
            _post(gateway_port, 1, "first")
            _post(gateway_port, 1, "first")  # Telegram redelivers it
            waiting = scrape(gateway_url)  # no worker yet: the turn waits
            assert value(waiting, "hermes_turns_accepted_total", platform="telegram") == 1
            assert value(waiting, "hermes_turns_duplicate_total", platform="telegram") == 1
            assert value(waiting, "hermes_turns_waiting", platform="telegram") == 1
            assert value(waiting, "hermes_oldest_turn_age_seconds", platform="telegram") > 0

            procs.append(_worker(env, hermes_home, worker_port))
            _post(gateway_port, 2, "second")
            wait_for(lambda: len(telegram.sent(CHAT)) >= 2, timeout=60)
            wait_for(
                lambda: (
                    value(scrape(worker_url), "hermes_replies_sent_total", platform="telegram") >= 2
                ),
                timeout=30,
            )
            after = scrape(worker_url)
            front = scrape(gateway_url)
        finally:
            codes = [proc.stop() for proc in reversed(procs)]
    assert codes == [0, 0], "\n".join(p.output() for p in procs)
    assert value(front, "hermes_turns_accepted_total", platform="telegram") == 2
    assert value(front, "hermes_turns_waiting", platform="telegram") == 0
    assert value(after, "hermes_turns_finished_total", platform="telegram", status="done") == 2
    assert value(after, "hermes_turn_seconds_count", platform="telegram") == 2
    assert value(after, "hermes_turn_wait_seconds_count", platform="telegram") == 2
    assert value(after, "hermes_model_call_seconds_count", model="offline", kind="reply") == 2
    assert (
        value(after, "hermes_model_tokens_total", model="offline", kind="reply", direction="output")
        > 0
    )
    assert value(after, "hermes_store_write_seconds_count") > 0
    assert value(after, "hermes_leases_held") == 0  # every drain let its lease go
    assert value(after, "hermes_outbox_pending", platform="telegram") == 0


@pytest.mark.timeout(180)
def test_a_prefork_worker_serves_the_sum_of_its_children(
    env: dict[str, str], hermes_home: Path
) -> None:
    gateway_port = int(env["HERMES_GATEWAY__PORT"])
    worker_port = free_port()
    with FakeTelegram(TG_TOKEN) as telegram:
        env = {**env, "HERMES_PLATFORMS__TELEGRAM__API_BASE": telegram.api_base}
        procs = [start_gateway(env, hermes_home, "telegram", gateway_port)]
        try:
            procs.append(_worker(env, hermes_home, worker_port, "-P", "prefork"))
            for n in range(1, 5):
                chat_update = _update(n, f"turn {n}")
                chat_update["message"]["chat"]["id"] = 1000 + n  # four sessions, in parallel
                chat_update["message"]["from"]["id"] = 1000 + n
                response = httpx.post(
                    f"http://127.0.0.1:{gateway_port}/telegram/webhook",
                    json=chat_update,
                    headers={"X-Telegram-Bot-Api-Secret-Token": TG_SECRET},
                    timeout=10,
                )
                assert response.status_code == 200
            url = f"http://127.0.0.1:{worker_port}/metrics"
            wait_for(
                lambda: (
                    value(
                        scrape(url),
                        "hermes_turns_finished_total",
                        platform="telegram",
                        status="done",
                    )
                    == 4
                ),
                timeout=90,
            )
            files = list((hermes_home / "run" / "metrics").rglob("*.db"))
        finally:
            codes = [proc.stop() for proc in reversed(procs)]
    assert codes == [0, 0], "\n".join(p.output() for p in procs)
    assert files, "prefork children count in the multiprocess directory under HERMES_HOME/run"


@pytest.mark.timeout(180)
def test_receivers_sharing_a_port_answer_for_each_other(
    env: dict[str, str], hermes_home: Path
) -> None:
    """As `hermes up` runs them: one directory of metric files, so whichever receiver process the
    kernel hands a scrape to, it counts every turn the others recorded."""
    port = int(env["HERMES_GATEWAY__PORT"])
    shared = hermes_home / "run" / "metrics" / "gateway"
    shared.mkdir(parents=True)
    env = {**env, "PROMETHEUS_MULTIPROC_DIR": str(shared)}
    procs = [start_gateway(env, hermes_home, "telegram", port)]
    try:
        second = Proc(env, hermes_home / "gateway-2.log", "gateway", "telegram", "-l", "INFO")
        procs.append(second)
        wait_for(lambda: "hermes gateway telegram on" in second.output(), timeout=30)
        time.sleep(0.5)  # listening
        for n in range(1, 17):  # new connections: the kernel spreads them (all 16 to one
            _post(port, n, f"turn {n}")  # of the two: 1 in 2**15)
        seen = {value(scrape(f"http://127.0.0.1:{port}/metrics"), "hermes_turns_accepted_total",
                      platform="telegram") for _ in range(8)}  # fmt: skip
    finally:
        codes = [proc.stop() for proc in reversed(procs)]
    assert codes == [0, 0], "\n".join(p.output() for p in procs)
    assert seen == {16.0}
    assert len({p.name for p in shared.glob("counter_*.db")}) == 2  # both counted
