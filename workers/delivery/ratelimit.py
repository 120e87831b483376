"""Fleet-wide send limits: token buckets and 429 cooldowns in Redis, shared by every worker.

A send takes one token from each of its buckets (say: this chat, this group, the whole bot) in
one Lua script, so concurrent workers never read-modify-write from Python; when any bucket is
empty, or a cooldown a 429 set is still running, nothing is taken and the script answers how
long to wait. The sender then raises RetryLater(wait): the flush re-schedules itself with that
countdown and the worker slot is free meanwhile. Time is Redis's own (TIME), so the workers'
clocks do not matter.

Buckets are keyed by a hash of the bot's token (the limits are per bot, across every machine
that sends as it); keys expire on their own once idle.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

PREFIX = "hermes:rl"


@dataclass(frozen=True, slots=True)
class Bucket:
    """`rate` tokens per second, holding at most `burst`."""

    key: str
    rate: float
    burst: float


class Limiter(Protocol):
    def acquire(self, buckets: Sequence[Bucket], cooldowns: Sequence[str], want: int = 1) -> float:
        """0.0 when a token was taken from every bucket; else seconds to wait (nothing taken).

        The wait is for `want` tokens (capped at each bucket's burst): the parts still to send.
        """
        ...

    def cool_down(self, key: str, seconds: float) -> None:
        """Make `key` wait at least `seconds` (a 429's retry_after), for every worker."""
        ...


def bot_key(platform: str, token: str) -> str:
    """A stable, secret-free name for one bot's limits."""
    digest = hashlib.sha256(token.encode()).hexdigest()[:16]
    return f"{PREFIX}:{platform}:{digest}"


# KEYS: the buckets, then the cooldown keys. ARGV: bucket count, tokens wanted in all (for the
# wait: a split reply waits until its remaining parts fit, not one part at a time), then rate
# and burst per bucket. One token is taken when every bucket has one.
ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local n = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local wait = 0
for i = n + 1, #KEYS do
  local left = redis.call('PTTL', KEYS[i])
  if left > 0 and left / 1000 > wait then wait = left / 1000 end
end
if wait > 0 then return tostring(wait) end
local level = {}
for i = 1, n do
  local rate = tonumber(ARGV[2 * i + 1])
  local burst = tonumber(ARGV[2 * i + 2])
  local state = redis.call('HMGET', KEYS[i], 'tokens', 'at')
  local tokens = tonumber(state[1]) or burst
  local at = tonumber(state[2]) or now
  if now > at then tokens = math.min(burst, tokens + (now - at) * rate) end
  if tokens < 1 then
    local need = (math.min(math.max(want, 1), burst) - tokens) / rate
    if need > wait then wait = need end
  end
  level[i] = tokens
end
if wait > 0 then return tostring(wait) end
for i = 1, n do
  local rate = tonumber(ARGV[2 * i + 1])
  local burst = tonumber(ARGV[2 * i + 2])
  redis.call('HSET', KEYS[i], 'tokens', tostring(level[i] - 1), 'at', tostring(now))
  redis.call('PEXPIRE', KEYS[i], math.ceil(burst / rate * 1000) + 1000)
end
return '0'
"""

# Lengthen, never shorten: two workers' 429s leave the longer wait in place.
COOL_DOWN = """
local ms = tonumber(ARGV[1])
if redis.call('PTTL', KEYS[1]) < ms then
  redis.call('SET', KEYS[1], '1', 'PX', ms)
end
return 1
"""


class RedisLimiter:
    """Token buckets and cooldowns in the fleet's Redis (the broker)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._acquire = client.register_script(ACQUIRE)
        self._cool = client.register_script(COOL_DOWN)

    def acquire(self, buckets: Sequence[Bucket], cooldowns: Sequence[str], want: int = 1) -> float:
        args: list[Any] = [len(buckets), want]
        for bucket in buckets:
            args.extend((repr(float(bucket.rate)), repr(float(bucket.burst))))
        keys = [b.key for b in buckets] + list(cooldowns)
        result = self._acquire(keys=keys, args=args)
        return float(result.decode() if isinstance(result, bytes) else result)

    def cool_down(self, key: str, seconds: float) -> None:
        ms = max(1, int(seconds * 1000))
        self._cool(keys=[key], args=[ms])


class LocalLimiter:
    """The cheap twin for one process (tests, or a broker that is not Redis): same arithmetic."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._levels: dict[str, tuple[float, float]] = {}
        self._cool: dict[str, float] = {}

    def acquire(self, buckets: Sequence[Bucket], cooldowns: Sequence[str], want: int = 1) -> float:
        with self._lock:
            now = self._clock()
            wait = max((self._cool.get(key, 0.0) - now for key in cooldowns), default=0.0)
            if wait > 0:
                return wait
            levels = []
            for bucket in buckets:
                tokens, at = self._levels.get(bucket.key, (bucket.burst, now))
                tokens = min(bucket.burst, tokens + max(0.0, now - at) * bucket.rate)
                if tokens < 1:
                    goal = min(max(want, 1), bucket.burst)
                    wait = max(wait, (goal - tokens) / bucket.rate)
                levels.append(tokens)
            if wait > 0:
                return wait
            for bucket, tokens in zip(buckets, levels, strict=True):
                self._levels[bucket.key] = (tokens - 1, now)
            return 0.0

    def cool_down(self, key: str, seconds: float) -> None:
        with self._lock:
            until = self._clock() + seconds
            self._cool[key] = max(self._cool.get(key, 0.0), until)
