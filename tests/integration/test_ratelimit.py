"""Fleet-wide token buckets and cooldowns in real Redis, shared by every worker (and process)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from tests.fakes.stack import redis_db_url
from workers.delivery.ratelimit import Bucket, LocalLimiter, RedisLimiter, bot_key


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(redis_db_url(redis_url))
    yield conn
    conn.close()


def test_a_bucket_allows_its_burst_then_says_how_long_to_wait(client: redis.Redis) -> None:
    limiter = RedisLimiter(client)
    bucket = [Bucket("t:chat:1", rate=2.0, burst=3.0)]
    assert [limiter.acquire(bucket, []) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = limiter.acquire(bucket, [])
    assert 0.4 < wait <= 0.5
    assert 1.4 < limiter.acquire(bucket, [], want=3) <= 1.5  # until three parts fit
    time.sleep(wait)
    assert limiter.acquire(bucket, []) == 0.0


def test_every_bucket_must_have_a_token_and_none_is_taken_otherwise(client: redis.Redis) -> None:
    limiter = RedisLimiter(client)
    chat = Bucket("t:chat:2", rate=1.0, burst=1.0)
    bot = Bucket("t:bot", rate=100.0, burst=2.0)
    assert limiter.acquire([chat, bot], []) == 0.0
    assert limiter.acquire([chat, bot], []) > 0  # the chat is empty …
    other = Bucket("t:chat:3", rate=1.0, burst=1.0)
    assert limiter.acquire([other, bot], []) == 0.0  # … and the bot kept its second token


def test_a_cooldown_holds_every_worker_and_is_only_ever_lengthened(client: redis.Redis) -> None:
    one, two = RedisLimiter(client), RedisLimiter(client)
    bucket = [Bucket("t:chat:4", rate=10.0, burst=10.0)]
    one.cool_down("t:cool:4", 1.0)
    two.cool_down("t:cool:4", 0.2)  # a shorter 429 elsewhere does not shorten it
    wait = two.acquire(bucket, ["t:cool:4"])
    assert 0.8 < wait <= 1.0
    time.sleep(wait + 0.02)
    assert one.acquire(bucket, ["t:cool:4"]) == 0.0


def test_concurrent_workers_share_one_budget(client: redis.Redis, redis_url: str) -> None:
    """Eight 'workers' (threads, each its own connection) hammer one chat: no more than the
    burst plus what the rate refills gets through."""
    url = redis_db_url(redis_url, 9)
    bucket = [Bucket("t:chat:shared", rate=5.0, burst=5.0)]
    granted: list[float] = []
    lock = threading.Lock()
    started = time.monotonic()

    def worker() -> None:
        conn = redis.Redis.from_url(url)
        limiter = RedisLimiter(conn)
        try:
            while time.monotonic() - started < 1.0:
                if limiter.acquire(bucket, []) == 0.0:
                    with lock:
                        granted.append(time.monotonic() - started)
        finally:
            conn.close()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # the burst, plus what the rate refilled by the last grant (a loaded machine runs late)
    assert 5 <= len(granted) <= 5 + 5 * max(granted) + 1


def test_keys_name_the_bot_without_its_token() -> None:
    key = bot_key("telegram", "123:SECRET-TOKEN")
    assert "SECRET" not in key and key == bot_key("telegram", "123:SECRET-TOKEN")
    assert key != bot_key("telegram", "123:OTHER")


def test_the_local_twin_does_the_same_arithmetic() -> None:
    now = [100.0]
    limiter = LocalLimiter(clock=lambda: now[0])
    bucket = [Bucket("chat", rate=1.0, burst=2.0)]
    assert [limiter.acquire(bucket, []) for _ in range(2)] == [0.0, 0.0]
    assert limiter.acquire(bucket, []) == pytest.approx(1.0)
    limiter.cool_down("cool", 5.0)
    now[0] += 2
    assert limiter.acquire(bucket, ["cool"]) == pytest.approx(3.0)
    now[0] += 3
    assert limiter.acquire(bucket, ["cool"]) == 0.0
